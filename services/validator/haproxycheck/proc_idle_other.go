//go:build unix && !linux

package haproxycheck

// idlePolicy does nothing where SCHED_IDLE is not known: the nice value
// alone lowers the check.
func idlePolicy(int) {}
