package demo

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr puts HAProxy in its own process group, so that a terminal's
// Ctrl-C reaches weft only and weft stops HAProxy with its workers, and
// has the kernel stop it if weft dies without doing so (see start).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// startRequest asks the starter thread to start cmd.
type startRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	starterOnce sync.Once
	starts      chan startRequest
)

// start starts cmd from a goroutine locked to its OS thread for the life
// of the process. The kernel sends a child its parent-death signal when
// the thread that forked it ends, not the process, and Go ends a thread
// whenever a goroutine exits while locked to it: a child started from an
// ordinary goroutine could be stopped while weft runs. The starter's
// thread never ends, nor runs other goroutines.
func start(cmd *exec.Cmd) error {
	starterOnce.Do(func() {
		starts = make(chan startRequest)
		go starter(starts)
	})
	done := make(chan error, 1)
	starts <- startRequest{cmd: cmd, done: done}
	return <-done
}

// starter runs forever on a locked thread (it is never unlocked, so the
// thread is not reused after it either).
func starter(reqs <-chan startRequest) {
	runtime.LockOSThread()
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}

// stopGroup asks the master and its workers to stop.
func stopGroup(p *os.Process) error {
	return signalGroup(p, syscall.SIGTERM)
}

// killGroup kills what is left of the process group.
func killGroup(p *os.Process) {
	_ = signalGroup(p, syscall.SIGKILL)
}

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// running reports whether process pid exists.
func running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
