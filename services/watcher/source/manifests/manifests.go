package manifests

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidManifest is matched by errors.Is for every ParseError: a file
// that cannot be read, a document that does not parse, an object without
// identity, or an object whose identity was already taken.
var ErrInvalidManifest = errors.New("invalid manifest")

// Object is one Kubernetes object read from a manifest.
type Object struct {
	APIVersion string
	Kind       string
	// Namespace is metadata.namespace as written, "" when absent.
	Namespace string
	Name      string
	// Body is the whole object as plain JSON data (see the package doc).
	Body map[string]any
	// File is the path of the file the object came from: the scanned
	// directory joined with the path inside it.
	File string
	// Doc is the number of the document in File, from 1.
	Doc int
	// Line is the first line of that document in File, from 1.
	Line int
	// sum is the sum of the YAML document's bytes (docSum), 0 for JSON.
	sum uint64
}

// KeptDoc is a YAML document that a read did not parse because its bytes
// are those of a document the reader already holds (see
// Watcher.RunDeltas): only its place in the file is new.
type KeptDoc struct {
	// Sum is the sum of the document's bytes.
	Sum uint64
	// Doc is the number of the document in its file, from 1.
	Doc int
	// Line is the first line of the document in its file, from 1.
	Line int
}

// String names the object by its identity, as "apps/v1 Deployment shop/web"
// or "v1 Namespace shop" for an object without a namespace.
func (o Object) String() string {
	return identity{o.APIVersion, o.Kind, o.Namespace, o.Name}.String()
}

// ParseError is a problem with one file, document or object. It never stops
// the rest of a folder from loading.
type ParseError struct {
	// File is the path of the file (or directory) the problem is in.
	File string
	// Doc is the number of the document in File, from 1; 0 when the
	// problem concerns the whole file.
	Doc int
	// Line is the first line of the document, from 1; 0 when unknown.
	Line int
	// Err is the cause.
	Err error
}

// Error formats the error as "file: document 2 (line 14): cause".
func (e ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Doc > 0 {
		b.WriteString(": document ")
		b.WriteString(strconv.Itoa(e.Doc))
		if e.Line > 0 {
			b.WriteString(" (line ")
			b.WriteString(strconv.Itoa(e.Line))
			b.WriteString(")")
		}
	} else if e.Line > 0 {
		b.WriteString(": line ")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString(ErrInvalidManifest.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e ParseError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidManifest.
func (e ParseError) Is(target error) bool { return target == ErrInvalidManifest }

// Snapshot is the content of a manifest folder at one moment.
type Snapshot struct {
	// Objects holds every valid object, sorted by (APIVersion, Kind,
	// Namespace, Name). Identities are unique.
	Objects []Object
	// Errors holds every problem found, ordered by file, then document.
	Errors []ParseError
}

// identity is what makes an object unique in a snapshot.
type identity struct {
	apiVersion, kind, namespace, name string
}

func (id identity) String() string {
	if id.namespace == "" {
		return fmt.Sprintf("%s %s %s", id.apiVersion, id.kind, id.name)
	}
	return fmt.Sprintf("%s %s %s/%s", id.apiVersion, id.kind, id.namespace, id.name)
}

func compareObjects(a, b Object) int {
	return cmp.Or(
		strings.Compare(a.APIVersion, b.APIVersion),
		strings.Compare(a.Kind, b.Kind),
		strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Name, b.Name),
	)
}

// location describes where an object was found, for messages.
func location(file string, doc, line int) string {
	return fmt.Sprintf("%s: document %d (line %d)", file, doc, line)
}
