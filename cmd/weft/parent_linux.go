package main

import (
	"fmt"
	"os"
	"syscall"
)

// startPPID is the parent's process id as the process started.
var startPPID = os.Getppid()

// exitWithParent has the kernel send this process SIGTERM when its parent
// ends (PR_SET_PDEATHSIG), and sends it at once if the parent ended
// before: `make run` and other supervisors that die, or are killed,
// without stopping weft then leave no weft (and no HAProxy) behind.
func exitWithParent() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("exit-with-parent: prctl: %w", errno)
	}
	if os.Getppid() != startPPID {
		return syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
	return nil
}
