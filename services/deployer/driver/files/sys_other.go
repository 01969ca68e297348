//go:build !unix

package files

import (
	"fmt"
	"io/fs"
	"os/exec"
	"runtime"
)

// resolveID rejects ownership, which this platform does not support.
func resolveID(kind, name string) (int, error) {
	if name == "" {
		return -1, nil
	}
	return 0, fmt.Errorf("%w: %s %q: file ownership is not supported on %s", ErrConfig, kind, name, runtime.GOOS)
}

func fileOwner(fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }

// killGroupOnCancel keeps the default: cancellation kills the shell.
func killGroupOnCancel(*exec.Cmd) {}
