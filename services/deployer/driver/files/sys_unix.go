//go:build unix

package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// resolveID turns a user or group name, or a numeric id, into an id; ""
// gives -1 (leave as is).
func resolveID(kind, name string) (int, error) {
	if name == "" {
		return -1, nil
	}
	if id, err := strconv.Atoi(name); err == nil {
		if id < 0 {
			return 0, fmt.Errorf("%w: %s %q: negative id", ErrConfig, kind, name)
		}
		return id, nil
	}
	var idStr string
	switch kind {
	case "owner":
		u, err := user.Lookup(name)
		if err != nil {
			return 0, fmt.Errorf("%w: owner %q: %w", ErrConfig, name, err)
		}
		idStr = u.Uid
	default:
		g, err := user.LookupGroup(name)
		if err != nil {
			return 0, fmt.Errorf("%w: group %q: %w", ErrConfig, name, err)
		}
		idStr = g.Gid
	}
	id, err := strconv.Atoi(idStr)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q: id %q is not numeric: %w", ErrConfig, kind, name, idStr, err)
	}
	return id, nil
}

// fileOwner returns the uid and gid of a file.
func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// killGroupOnCancel starts the command in its own process group and makes
// cancellation kill the whole group, so that what the shell started dies with
// it.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
}
