//go:build !linux

package demo

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// sysProcAttr keeps the defaults: without Linux's process groups and
// parent-death signal, HAProxy's master stops its own workers.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// start starts cmd.
func start(cmd *exec.Cmd) error { return cmd.Start() }

// stopGroup asks the master to stop.
func stopGroup(p *os.Process) error {
	if err := p.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// killGroup kills the master.
func killGroup(p *os.Process) { _ = p.Kill() }

// running reports whether process pid exists.
func running(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}
