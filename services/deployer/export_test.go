package deployer

import "time"

// SetRetry sets how failing orders are retried and reminded of, for tests
// that must not wait minutes; call it before any deployer runs.
func SetRetry(first, max, reminder time.Duration) {
	retryFirst, retryMax, failureReminder = first, max, reminder
}
