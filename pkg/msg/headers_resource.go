package msg

// Headers of a resource write (a Resource value put to the resources
// bucket), copied from the value so that a reader that needs no more than
// them (the watcher's relay) does not decode the object. A write without
// them (one made before they existed) is read from its value.
const (
	// HeaderResourceHash is Resource.Hash.
	HeaderResourceHash = "Weft-Resource-Hash"
	// HeaderResourceVersion is Resource.ResourceVersion (absent when
	// empty).
	HeaderResourceVersion = "Weft-Resource-Version"
)
