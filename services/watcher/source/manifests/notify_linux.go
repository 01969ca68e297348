//go:build linux

package manifests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what every watched directory reports: entries created,
// moved in or out, removed, written, closed after writing, their
// attributes changed; and the directory itself removed or moved.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// opsOfMask is what each kernel notification says.
var opsOfMask = []struct {
	mask uint32
	op   op
}{
	{unix.IN_CREATE, opCreate},
	{unix.IN_MOVED_TO, opCreate | opClosed},
	{unix.IN_MODIFY, opWrite},
	{unix.IN_CLOSE_WRITE, opClosed},
	{unix.IN_DELETE | unix.IN_DELETE_SELF, opRemove},
	{unix.IN_MOVED_FROM | unix.IN_MOVE_SELF, opRename},
	{unix.IN_ATTRIB, opChmod},
}

// errOverflow is reported when the kernel's queue of notifications
// overflowed: some were lost.
var errOverflow = errors.New("manifests: notification queue overflowed")

// inotify reads the kernel's notifications in the order the kernel queued
// them, one goroutine for all the watches, so that a file's close comes
// after its writes. (fsnotify does not report the close of a written file.)
type inotify struct {
	// file is the non-blocking descriptor fd, so that closing it ends a
	// read (which it would not once file.Fd had made it blocking)
	file *os.File
	fd   int

	mu     sync.Mutex
	byWd   map[int32]string
	byPath map[string]int32

	evs     chan event
	errs    chan error
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newNotifier() (notifier, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	n := &inotify{
		file:    os.NewFile(uintptr(fd), "inotify"),
		fd:      fd,
		byWd:    map[int32]string{},
		byPath:  map[string]int32{},
		evs:     make(chan event, 64),
		errs:    make(chan error, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go n.read()
	return n, nil
}

func (n *inotify) add(dir string) error {
	dir = filepath.Clean(dir)
	n.mu.Lock()
	defer n.mu.Unlock()
	wd, err := unix.InotifyAddWatch(n.fd, dir, watchMask)
	if err != nil {
		return &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	// The kernel gives a directory one watch whatever path it is added
	// by: a directory moved and added under its new path keeps the watch,
	// which then goes by the new path only.
	if old, ok := n.byWd[int32(wd)]; ok && old != dir {
		delete(n.byPath, old)
	}
	if old, ok := n.byPath[dir]; ok && old != int32(wd) {
		delete(n.byWd, old)
	}
	n.byWd[int32(wd)], n.byPath[dir] = dir, int32(wd)
	return nil
}

func (n *inotify) remove(dir string) error {
	dir = filepath.Clean(dir)
	n.mu.Lock()
	defer n.mu.Unlock()
	wd, ok := n.byPath[dir]
	if !ok {
		return fmt.Errorf("manifests: %s is not watched", dir)
	}
	delete(n.byPath, dir)
	delete(n.byWd, wd)
	if _, err := unix.InotifyRmWatch(n.fd, uint32(wd)); err != nil {
		// EINVAL: the kernel dropped the watch already (the directory
		// was removed).
		return &os.PathError{Op: "inotify_rm_watch", Path: dir, Err: err}
	}
	return nil
}

func (n *inotify) watchList() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.byPath))
	for p := range n.byPath {
		out = append(out, p)
	}
	return out
}

func (n *inotify) events() <-chan event { return n.evs }
func (n *inotify) errors() <-chan error { return n.errs }

// close stops the reads and closes the channels, and waits for that.
func (n *inotify) close() error {
	var err error
	n.once.Do(func() {
		close(n.closing)
		err = n.file.Close()
		<-n.done
	})
	return err
}

// read turns what the kernel queues into events until the notifier is
// closed.
func (n *inotify) read() {
	defer func() {
		close(n.evs)
		close(n.errs)
		close(n.done)
	}()
	buf := make([]byte, 64<<10)
	for {
		size, err := n.file.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || !n.sendErr(fmt.Errorf("manifests: read notifications: %w", err)) {
				return
			}
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= size; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			if raw.Mask&unix.IN_Q_OVERFLOW != 0 {
				if !n.sendErr(errOverflow) {
					return
				}
				continue
			}
			ev, ok := n.translate(raw.Wd, raw.Mask, strings.TrimRight(string(name), "\x00"))
			if !ok {
				continue
			}
			select {
			case n.evs <- ev:
			case <-n.closing:
				return
			}
		}
	}
}

// sendErr hands err over unless the notifier is closing.
func (n *inotify) sendErr(err error) bool {
	select {
	case n.errs <- err:
		return true
	case <-n.closing:
		return false
	}
}

// translate turns one kernel notification into an event, keeping the
// watches in line with what the kernel did: it drops the watch of a
// directory removed or moved away. It reports false for a notification
// that says nothing to act on.
func (n *inotify) translate(wd int32, mask uint32, name string) (event, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	dir, ok := n.byWd[wd]
	if !ok {
		return event{}, false // removed since the kernel queued it
	}
	if mask&(unix.IN_IGNORED|unix.IN_UNMOUNT) != 0 {
		// The kernel dropped the watch.
		delete(n.byWd, wd)
		delete(n.byPath, dir)
		return event{}, false
	}
	ev := event{name: dir}
	if name != "" {
		ev.name = filepath.Join(dir, name)
	}
	if mask&unix.IN_DELETE_SELF != 0 {
		// The kernel drops the watch (IN_IGNORED follows).
		delete(n.byWd, wd)
		delete(n.byPath, dir)
	}
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		if _, parent := n.byPath[filepath.Dir(dir)]; parent {
			// The parent's watch reports the removal or the move, by
			// name. A moved directory keeps its watch, under the path it
			// was added by until it is added by its new one (add) or
			// removed.
			return event{}, false
		}
	}
	for _, m := range opsOfMask {
		if mask&m.mask != 0 {
			ev.op |= m.op
		}
	}
	return ev, ev.op != 0
}
