package renderer

import (
	"cmp"
	"reflect"
	"slices"
	"sync"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
)

// changeLog keeps, for one target, the objects that changed since its
// last render read the index: per key the object that render read (the
// first old value seen) and the latest one. A render takes the log inside
// its read of the index, so the log holds exactly the changes between the
// two reads; a render that publishes nothing gives it back. Its size is
// bounded by the number of objects, whatever the number of changes.
type changeLog struct {
	mu       sync.Mutex
	tracking bool // set by the first take: nothing before it is known
	byKey    map[string]*pendingChange
	// version is the render version this replica published last: the
	// log describes the changes since the target's previous render only
	// when that render is this one.
	version uint64
}

type pendingChange struct {
	typ, key string
	rev      uint64
	old, new *index.Object // decoded when the render reports the change
}

// note records one index change (run inside the index write).
func (l *changeLog) note(c index.Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.tracking {
		return
	}
	if p, ok := l.byKey[c.ID]; ok {
		p.rev, p.new = c.Rev, c.New
		return
	}
	l.byKey[c.ID] = &pendingChange{typ: c.Type, key: c.ID, rev: c.Rev, old: c.Old, new: c.New}
}

// take returns the changes since the last take and starts a new log.
func (l *changeLog) take() map[string]*pendingChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.byKey
	l.byKey, l.tracking = map[string]*pendingChange{}, true
	return m
}

// giveBack puts the changes of a render that published nothing back in
// front of those noted since.
func (l *changeLog) giveBack(m map[string]*pendingChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, old := range m {
		if p, ok := l.byKey[k]; ok {
			p.old = old.old
			continue
		}
		l.byKey[k] = old
	}
}

// follows reports whether the log describes the changes since the
// target's render at version prev (this replica published it).
func (l *changeLog) follows(prev uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return prev > 0 && l.version == prev
}

// published records the version this replica just published.
func (l *changeLog) published(version uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.version = version
}

// objectChanges lists m for a Provenance, by type and key, at most
// msg.MaxProvenanceChanged of them; more counts the rest. An object
// written and deleted again between the two renders is no change.
func objectChanges(m map[string]*pendingChange) (out []msg.ObjectChange, more int) {
	keys := make([]string, 0, len(m))
	for k, p := range m {
		if p.old == nil && p.new == nil {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m[a].typ, m[b].typ); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, k := range keys {
		if len(out) == msg.MaxProvenanceChanged {
			more++
			continue
		}
		p := m[k]
		_, _, ns, name, err := msg.ParseResourceKey(k)
		if err != nil {
			name = k
		}
		oc := msg.ObjectChange{Type: p.typ, Namespace: ns, Name: name, Op: msg.OpPut, Revision: p.rev, Created: p.old == nil}
		if p.new == nil {
			oc.Op = msg.OpDelete
		}
		if p.old != nil && p.new != nil {
			fields := fieldDiff(p.old.Map(), p.new.Map())
			if len(fields) > msg.MaxChangedFields {
				oc.FieldsMore = len(fields) - msg.MaxChangedFields
				fields = fields[:msg.MaxChangedFields]
			}
			oc.Fields = fields
		}
		out = append(out, oc)
	}
	return out, more
}

// fieldDiff returns the field paths whose values differ between old and
// new, sorted: top-level fields, and one level into those that are objects
// on both sides ("spec.rules", "metadata.labels").
func fieldDiff(old, new map[string]any) []string {
	var out []string
	for _, k := range unionKeys(old, new) {
		a, b := old[k], new[k]
		if reflect.DeepEqual(a, b) {
			continue
		}
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if !aok || !bok {
			out = append(out, k)
			continue
		}
		for _, sub := range unionKeys(am, bm) {
			if !reflect.DeepEqual(am[sub], bm[sub]) {
				out = append(out, k+"."+sub)
			}
		}
	}
	return out
}

func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
