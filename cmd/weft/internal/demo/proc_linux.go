package demo

import (
	"errors"
	"os"
	"syscall"
)

// sysProcAttr puts HAProxy in its own process group, so that a terminal's
// Ctrl-C reaches weft only and weft stops HAProxy with its workers, and
// has the kernel stop it if weft dies without doing so.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
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
