package deployer

import "time"

// SetRetry sets how failing orders are retried and reminded of, for tests
// that must not wait minutes, and returns what it replaced; call it while
// no deployer runs.
func SetRetry(first, max, reminder time.Duration) (oldFirst, oldMax, oldReminder time.Duration) {
	oldFirst, oldMax, oldReminder = retryFirst, retryMax, failureReminder
	retryFirst, retryMax, failureReminder = first, max, reminder
	return oldFirst, oldMax, oldReminder
}
