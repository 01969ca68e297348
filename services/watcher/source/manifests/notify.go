package manifests

// op is what a notification says happened to a name; one notification can
// say several things at once.
type op uint32

const (
	opCreate op = 1 << iota // created, or moved in
	opWrite                 // written to
	opRemove                // removed
	opRename                // moved away
	opChmod                 // its attributes changed
	// opClosed: a writer closed the file, or it was moved into place, so
	// its content is whole. Only the Linux notifier reports it; elsewhere
	// a write is read once the folder has been quiet for the debounce.
	opClosed
)

// has reports whether o says any of what other says.
func (o op) has(other op) bool { return o&other != 0 }

// event is one notification about a name inside a watched directory, or
// about the directory itself.
type event struct {
	name string
	op   op
}

// notifier delivers the notifications of a set of watched directories (not
// of their subdirectories) in the order the changes happened. add watches
// a directory (again: a no-op); remove stops watching one; watchList is
// what is watched. The channels are closed when the notifier is.
type notifier interface {
	add(dir string) error
	remove(dir string) error
	watchList() []string
	events() <-chan event
	errors() <-chan error
	close() error
}
