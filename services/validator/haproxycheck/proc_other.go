//go:build !unix

package haproxycheck

import "os/exec"

// setProcessGroup keeps exec's default cancellation, which kills the process.
func setProcessGroup(*exec.Cmd) {}

// lowerPriority does nothing where there are no nice values.
func lowerPriority(int) {}
