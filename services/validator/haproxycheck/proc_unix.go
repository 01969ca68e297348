//go:build unix

package haproxycheck

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup starts haproxy in its own process group and makes
// cancellation kill the whole group, so nothing it spawned (lua-load scripts
// can run programs) outlives the check.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// lowerPriority sets the nice value of process pid to BehindNice. Raising
// a nice value needs no privilege; where it fails the check runs at the
// priority it has.
func lowerPriority(pid int) {
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, BehindNice)
}
