//go:build !linux

package manifests

import "github.com/fsnotify/fsnotify"

// fsnotifier is fsnotify's watcher, which reports no close of a written
// file: a write is read once the folder has been quiet for the debounce.
type fsnotifier struct {
	w    *fsnotify.Watcher
	evs  chan event
	done chan struct{}
}

func newNotifier() (notifier, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	n := &fsnotifier{w: w, evs: make(chan event), done: make(chan struct{})}
	go n.relay()
	return n, nil
}

// opsOfFsnotify is what each of fsnotify's operations says.
var opsOfFsnotify = []struct {
	from fsnotify.Op
	to   op
}{{fsnotify.Create, opCreate}, {fsnotify.Write, opWrite}, {fsnotify.Remove, opRemove}, {fsnotify.Rename, opRename}, {fsnotify.Chmod, opChmod}}

// relay turns fsnotify's events into this package's until fsnotify closes
// its channel or the notifier is closed.
func (n *fsnotifier) relay() {
	defer close(n.evs)
	for ev := range n.w.Events {
		var o op
		for _, m := range opsOfFsnotify {
			if ev.Has(m.from) {
				o |= m.to
			}
		}
		select {
		case n.evs <- event{name: ev.Name, op: o}:
		case <-n.done:
			return
		}
	}
}

func (n *fsnotifier) add(dir string) error    { return n.w.Add(dir) }
func (n *fsnotifier) remove(dir string) error { return n.w.Remove(dir) }
func (n *fsnotifier) watchList() []string     { return n.w.WatchList() }
func (n *fsnotifier) events() <-chan event    { return n.evs }
func (n *fsnotifier) errors() <-chan error    { return n.w.Errors }

func (n *fsnotifier) close() error {
	close(n.done)
	return n.w.Close()
}
