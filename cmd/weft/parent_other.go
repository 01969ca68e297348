//go:build !linux

package main

import "errors"

// exitWithParent needs Linux's parent-death signal.
func exitWithParent() error {
	return errors.New("exit-with-parent: only supported on Linux")
}
