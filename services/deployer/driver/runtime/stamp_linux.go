package runtime

import (
	"io/fs"
	"syscall"
)

// stamp is what the filesystem says of a file that any change to it
// changes: device and inode, size, modification and change times.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

func stampOf(fi fs.FileInfo) (stamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}, false
	}
	return stamp{dev: st.Dev, ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}
