package haproxycheck

import "golang.org/x/sys/unix"

// idlePolicy puts process pid under SCHED_IDLE: it runs on a CPU only
// when nothing else wants it, and any other task that wakes up takes the
// CPU from it at once. A nice value only shares the CPU by weight, and a
// task that wakes on a CPU a niced haproxy holds can wait for the rest of
// its time slice: with the services on a few cores, the background whole
// check of a large configuration then delayed the changes being deployed.
func idlePolicy(pid int) {
	_ = unix.SchedSetAttr(pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: BehindNice}, 0)
}
