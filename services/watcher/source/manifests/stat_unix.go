//go:build unix

package manifests

import (
	"io/fs"
	"syscall"
)

// fileID returns the device and inode of a file.
func fileID(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino //nolint:unconvert // Dev is not uint64 on every platform
	}
	return 0, 0
}
