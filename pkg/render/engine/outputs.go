package engine

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/nikolalohinski/gonja/v2/exec"

	"github.com/weftio/weft/pkg/render/index"
)

// Outputs are cached like fragment entries: each output keeps its text,
// the errors it registered, and what it read (objects by id, get_indexed
// lookups, whole types, values, and each fragment part it joined or
// picked, at the part's version). A render takes an output from the cache
// when nothing it read has changed since: no reported change affects it,
// its stores are the same stores with no unreported change of a type it
// read, no value it read differs, and every fragment part it read is at
// the version it read. So after one change only the outputs that read
// what changed run again.
//
// An output is not cached, and runs on every render, when a render's
// resources hold anything but *index.Store values (their changes cannot
// be seen) or when it calls fetch() (bodies kept on demand have no
// revisions here). Input.Path must answer the same for every render of a
// Set. An output's text is a function of what it read: the random filter
// picks again only when the output runs again.

// outputState is what the Set keeps of one output between renders.
type outputState struct {
	o       *output
	valid   bool // content and errors may be reused if nothing read changed
	dirty   bool // a change affected what it read
	content []byte
	errors  []RegisteredError
	deps    deps
	frags   []fragDep
}

// fragDep is one fragment part an output read, at the version it read.
type fragDep struct {
	fs   *fragState
	part string
	ver  uint64
}

// fragRef is one fragment part read while an output renders.
type fragRef struct {
	fs   *fragState
	part string
}

// storeSeen is a store as the last render saw it: its change count then,
// and the changes of its type reported since.
type storeSeen struct {
	st       *index.Store
	changes  uint64
	reported uint64
}

// outputCache is every output's state and the index from what an output
// read to the outputs that read it. The Set's lock guards it.
type outputCache struct {
	states []*outputState // in the order of Set.outputs
	idx    depIndex[*outputState]
	errVer uint64                // counts the changes of the outputs' errors
	stores map[string]*storeSeen // by type, as of the last render
}

func newOutputCache(outs []*output) *outputCache {
	c := &outputCache{idx: newDepIndex[*outputState](), stores: map[string]*storeSeen{}}
	for _, o := range outs {
		c.states = append(c.states, &outputState{o: o})
	}
	return c
}

// invalidate marks the outputs a change affects and reports whether the
// change can alter any output: one read what changed, or one runs on the
// next render whatever changed (never rendered, not cacheable).
func (c *outputCache) invalidate(ch Change) bool {
	if ch.Value == "" {
		if s := c.stores[ch.Type]; s != nil {
			s.reported++
		}
	}
	affected := false
	c.idx.affected(ch, func(os *outputState) {
		affected = true
		os.dirty = true
	})
	for _, os := range c.states {
		if !os.valid {
			return true
		}
	}
	return affected
}

func (c *outputCache) invalidateAll() {
	for _, os := range c.states {
		os.dirty = true
	}
}

// check compares the render's resources with the last render's: another
// store (or none) for a type invalidates every output, a change count
// that disagrees with the changes reported invalidates the outputs that
// read the type. It reports whether outputs may be cached at all: every
// resource is an *index.Store.
func (c *outputCache) check(res resourcesMap) bool {
	cacheable := true
	now := make(map[string]*storeSeen, len(res))
	for typ, v := range res {
		sv, ok := v.(*storeValue)
		if !ok {
			cacheable = false
			continue
		}
		now[typ] = &storeSeen{st: sv.d.st, changes: sv.d.st.Changes()}
	}
	switch {
	case !cacheable:
		c.invalidateAll()
	case len(now) != len(c.stores):
		c.invalidateAll()
	default:
		for typ, n := range now {
			old := c.stores[typ]
			switch {
			case old == nil || old.st != n.st:
				c.invalidateAll()
			case n.changes-old.changes != old.reported:
				for _, os := range c.states {
					if os.deps.readsType(typ) {
						os.dirty = true
					}
				}
			}
		}
	}
	c.stores = now
	return cacheable
}

// fresh reports whether os can be reused: nothing it read has changed.
func (os *outputState) fresh() bool {
	if !os.valid || os.dirty {
		return false
	}
	for _, d := range os.frags {
		if d.fs.partVersion(d.part) != d.ver {
			return false
		}
	}
	return true
}

// store keeps what an output's render produced and read.
func (c *outputCache) store(os *outputState, content []byte, st *renderState, d deps, cacheable bool) {
	c.idx.unregister(os, &os.deps)
	os.deps = d
	c.idx.register(os, &os.deps)
	if !slices.Equal(os.errors, st.errors) {
		c.errVer++
	}
	os.content, os.errors = content, st.errors
	os.frags = os.frags[:0]
	for _, r := range st.fragReads.list() {
		os.frags = append(os.frags, fragDep{fs: r.fs, part: r.part, ver: r.fs.partVersion(r.part)})
	}
	os.valid, os.dirty = cacheable && !st.fetched, false
}

// forget marks os as not reusable after its render failed.
func (c *outputCache) forget(os *outputState) {
	os.valid, os.content, os.errors = false, nil, nil
	c.errVer++
}

// errorsKey identifies the errors a render registers: the same key, the
// same errors.
type errorsKey struct{ entries, outputs uint64 }

// registeredErrors returns the errors of every fragment entry, fragment
// by fragment (by name) and entry by entry (by id), then of every output
// in order, exact duplicates dropped; the list is built again only after
// one of them changed.
func (s *Set) registeredErrors() []RegisteredError {
	key := errorsKey{outputs: s.outs.errVer}
	if s.cache != nil {
		key.entries = s.cache.errVer
	}
	if s.haveErrors && key == s.errorsKey {
		return slices.Clip(s.errors)
	}
	all := &renderState{seenErr: make(map[RegisteredError]bool, len(s.errors)), errors: make([]RegisteredError, 0, len(s.errors))}
	if s.cache != nil {
		s.cache.registerEntryErrors(all)
	}
	for _, os := range s.outs.states {
		for _, e := range os.errors {
			all.addError(e)
		}
	}
	s.errors, s.errorsKey, s.haveErrors = all.errors, key, true
	return slices.Clip(s.errors)
}

// valuesRead returns the names of the values the outputs and fragment
// entries read, sorted, and whether any read all of them.
func (s *Set) valuesRead() ([]string, bool) {
	names := map[string]bool{}
	all := s.outs.idx.valueNames(names)
	if s.cache != nil && s.cache.idx.valueNames(names) {
		all = true
	}
	if len(names) == 0 {
		return nil, all
	}
	return slices.Sorted(maps.Keys(names)), all
}

// checkValues invalidates the readers of every value that differs from
// the last render's, so that a value change reaches the cache even when no
// Invalidate reported it.
func (s *Set) checkValues(values map[string]any) {
	if s.haveValues {
		for k, v := range values {
			if old, ok := s.lastValues[k]; !ok || !reflect.DeepEqual(old, v) {
				s.invalidate(Change{Value: k})
			}
		}
		for k := range s.lastValues {
			if _, ok := values[k]; !ok {
				s.invalidate(Change{Value: k})
			}
		}
	}
	s.lastValues, s.haveValues = maps.Clone(values), true
}

func (s *Set) invalidate(ch Change) bool {
	affected := false
	if s.cache != nil {
		affected = s.cache.invalidate(ch)
	}
	return s.outs.invalidate(ch) || affected
}

// Invalidate marks the cached fragment entries and outputs that changes
// affect, so the next Render renders them again: for an object change, the
// object's own fragment entries, and the entries and outputs that read the
// object by id, whose get_indexed lookup on its type is a prefix of its
// old or new key tuple, or that read its whole type; for a value change,
// those that read the value or all values. Every change to the data
// behind Input.Resources should be reported before the next Render.
// Render itself notices changes that were not reported, less precisely:
// for a fragment's own type it compares every object's revision; for an
// output, any unreported change of a type it read runs it again. It also
// notices values that differ from the last render's. It cannot notice an
// unreported change of an object that a fragment entry of another type
// read.
//
// Invalidate reports whether the changes can alter the next Render's
// output: false only when no fragment entry and no output read anything
// they changed, none of them is of a fragment's own type, and every
// output was rendered before and may be reused. A caller can skip the
// render of changes that cannot alter it (it renders the same bytes).
func (s *Set) Invalidate(changes []Change) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	affected := false
	for _, ch := range changes {
		if s.invalidate(ch) {
			affected = true
		}
	}
	return affected
}

// renderOutput runs one output with its own state, recording what it reads.
func (s *Set) renderOutput(st *renderState, res resourcesMap, values map[string]any, o *output) (content []byte, d deps, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Kind: o.Kind, Template: o.Name, Message: fmt.Sprintf("panic while rendering: %v", p)}
		}
	}()
	rec := &reads{}
	view := newValuesView(values)
	st.data = exec.NewContext(map[string]any{
		"resources":      res.recording(rec, true),
		"values":         view,
		"register_error": st.registerError,
		"fetch":          st.fetch,
		"fragments":      fragmentsFunc(st.fragmentsFunction),
		"fragment":       st.fragmentFunction,
		stateKey:         st,
	})
	buf := bytes.NewBuffer(make([]byte, 0, o.lastSize.Load()+512))
	err = o.tpl.Execute(buf, st.data)
	d = rec.deps(view)
	if err != nil {
		return nil, d, runtimeError(o.Kind, o.Name, err)
	}
	o.lastSize.Store(int64(buf.Len()))
	return buf.Bytes(), d, nil
}
