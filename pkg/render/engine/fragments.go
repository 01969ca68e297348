package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"

	"github.com/weftio/weft/pkg/render/index"
)

// Fragment is a template rendered once for every object of one resource
// type. Inside it `obj` is the object and `id` its id, next to
// `resources`, `values`, the snippets and every filter and function of an
// output (except fragments() and fragment()). It keeps its final newline,
// like an output, so fragments of one line each join into lines.
type Fragment struct {
	// ForEach is the resource type (a key of Input.Resources holding an
	// *index.Store) whose objects the fragment is rendered for.
	ForEach string
	Text    string
}

// Change is one change of a render's input, for Set.Invalidate: an
// object of Type with ID was created, updated or deleted (OldKeys and
// NewKeys are its index key tuples before and after, nil when absent), or,
// when Value is set, the value of that name changed (the other fields are
// then ignored).
type Change struct {
	Type    string
	ID      string
	OldKeys []string
	NewKeys []string
	Value   string
}

// EntryRef names one fragment entry: the fragment and the object's id.
type EntryRef struct {
	Fragment string
	ID       string
}

// parallelMin is the fewest entries per worker for which rendering them in
// parallel pays off.
const parallelMin = 16

// maxEntryErrors bounds how many failing entries one render reports.
const maxEntryErrors = 5

type fragment struct {
	name    string
	forEach string
	tpl     *exec.Template
	// parts are the part names the fragment declares (through the
	// snippets it includes too); anyPart is set when an include by
	// expression makes them unknowable.
	parts   map[string]bool
	anyPart bool
}

// fragmentCache holds every fragment's rendered entries and the index
// from what an entry read to the entries that read it. The Set's lock
// guards it.
type fragmentCache struct {
	states []*fragState // in the order of Set.fragments (by name)
	gen    uint64       // render generation, marks the entries still present
	idx    depIndex[*entry]
	errVer uint64 // counts the changes of the entries' errors
}

// fragState is one fragment's cache.
type fragState struct {
	f       *fragment
	ready   bool         // store is set: a render has scanned it
	store   *index.Store // the store the entries were rendered from
	entries map[string]*entry
	order   []*entry // the entries of the last render, by id
	// shape counts the changes of order (entries added, dropped or
	// reordered); partVer counts, per part ("" is the main output), the
	// changes of that part's text in any entry. Their sum is the part's
	// version (see partVersion). joins caches, per part, the entries'
	// text joined in id order (see joins.go).
	shape   uint64
	partVer map[string]uint64
	joins   map[string]*join
	// withErrors counts the entries that registered errors.
	withErrors int
	// pending are the entries marked dirty since the last render.
	pending []*entry
	// seenChanges is the store's change count at the last render;
	// reported counts the changes of the fragment's type reported since,
	// and touched holds their ids.
	seenChanges uint64
	reported    uint64
	touched     map[string]struct{}
}

// entry is one fragment rendered for one object.
type entry struct {
	state  *fragState
	id     string
	rev    uint64 // the object's revision when rendered
	out    string
	parts  map[string]string // the named parts (nil without any)
	errors []RegisteredError
	deps   deps
	dirty  bool
	seen   uint64 // the render generation that last found the object
}

// job is one entry to render in this render.
type job struct {
	e *entry
	// it is the object at its revision, decoded when its entry renders:
	// the jobs of a render hold the index's encoded objects, not a tree
	// for each.
	it index.Item

	out    string
	parts  map[string]string
	errors []RegisteredError
	deps   deps
	err    error
}

func newFragmentCache(frags []*fragment) *fragmentCache {
	c := &fragmentCache{idx: newDepIndex[*entry]()}
	for _, f := range frags {
		c.states = append(c.states, &fragState{f: f, entries: map[string]*entry{}, touched: map[string]struct{}{}, shape: 1, partVer: map[string]uint64{}, joins: map[string]*join{}})
	}
	return c
}

// register adds e to the index of its deps; unregister removes it.
func (c *fragmentCache) register(e *entry)   { c.idx.register(e, &e.deps) }
func (c *fragmentCache) unregister(e *entry) { c.idx.unregister(e, &e.deps) }

// partVersion is the version of a part ("": the main output) joined over
// the entries: it grows whenever the join can differ.
func (fs *fragState) partVersion(part string) uint64 {
	return fs.shape + fs.partVer[part]
}

// setContent stores a rendered entry's text and parts, counting a change
// of every part whose text differs.
func (fs *fragState) setContent(e *entry, out string, parts map[string]string) {
	if e.out != out {
		fs.partChanged(e, "")
	}
	for p, t := range parts {
		if e.parts[p] != t {
			fs.partChanged(e, p)
		}
	}
	for p, t := range e.parts {
		if _, ok := parts[p]; !ok && t != "" {
			fs.partChanged(e, p)
		}
	}
	e.out, e.parts = out, parts
}

// drop removes e from its fragment's entries and from the reverse maps
// (not from order).
func (c *fragmentCache) drop(e *entry) {
	c.unregister(e)
	delete(e.state.entries, e.id)
	if len(e.errors) > 0 {
		e.state.withErrors--
		c.errVer++
	}
	e.state.shape++
}

// mark makes e dirty: the next render renders it again.
func mark(e *entry) {
	if !e.dirty {
		e.dirty = true
		e.state.pending = append(e.state.pending, e)
	}
}

// invalidate marks the entries a change affects and reports whether it
// affects any: an entry that read what changed, or the change is of a
// fragment's own type.
func (c *fragmentCache) invalidate(ch Change) bool {
	affected := false
	c.idx.affected(ch, func(e *entry) {
		affected = true
		mark(e)
	})
	if ch.Value != "" {
		return affected
	}
	for _, fs := range c.states {
		if fs.f.forEach != ch.Type {
			continue
		}
		affected = true
		// Before the first render there is nothing to mark: it scans.
		if fs.ready {
			fs.reported++
			fs.touched[ch.ID] = struct{}{}
			if e := fs.entries[ch.ID]; e != nil {
				mark(e)
			}
		}
	}
	return affected
}

// reset forgets every entry of fs (its store was replaced).
func (c *fragmentCache) reset(fs *fragState) {
	for _, e := range fs.entries {
		c.unregister(e)
	}
	fs.entries = map[string]*entry{}
	fs.order, fs.withErrors, fs.pending = nil, 0, nil
	fs.shape++
	c.errVer++
}

// scan compares fs with every object of its store (nil: none): new
// objects get dirty entries, changed revisions mark theirs, entries of
// objects that are gone are dropped, and order is rebuilt.
func (c *fragmentCache) scan(fs *fragState, sv *storeValue) {
	c.gen++
	var items []index.Item
	if sv != nil {
		items = sv.d.snapshot()
	}
	order := make([]*entry, 0, len(items))
	for i, it := range items {
		e := fs.entries[it.ID]
		switch {
		case e == nil:
			e = &entry{state: fs, id: it.ID}
			fs.entries[it.ID] = e
			mark(e)
		case e.rev != it.Rev:
			mark(e)
		}
		if i >= len(fs.order) || fs.order[i] != e {
			fs.shape++
		}
		e.seen = c.gen
		order = append(order, e)
	}
	if len(fs.entries) > len(items) {
		for _, e := range fs.entries {
			if e.seen != c.gen {
				c.drop(e)
			}
		}
	}
	if len(order) != len(fs.order) {
		fs.shape++
	}
	fs.order = order
}

// applyTouched updates fs from the objects of its type that changes
// reported since the last render, without looking at the others.
func (c *fragmentCache) applyTouched(fs *fragState) {
	for id := range fs.touched {
		it, ok := fs.store.Item(id)
		e := fs.entries[id]
		i, found := slices.BinarySearchFunc(fs.order, id, func(e *entry, id string) int { return strings.Compare(e.id, id) })
		switch {
		case ok && e == nil:
			e = &entry{state: fs, id: id}
			fs.entries[id] = e
			mark(e)
			fs.order = slices.Insert(fs.order, i, e)
			fs.shape++
		case ok:
			if e.rev != it.Rev {
				mark(e)
			}
		case e != nil:
			c.drop(e)
			if found {
				fs.order = slices.Delete(fs.order, i, i+1)
			}
		}
	}
}

// fragmentStore returns the store a fragment iterates: nil when the type
// is not among the resources.
func fragmentStore(res resourcesMap, typ string) (*storeValue, error) {
	v, ok := res[typ]
	if !ok {
		return nil, nil
	}
	sv, ok := v.(*storeValue)
	if !ok {
		return nil, fmt.Errorf("resources.%s is not an indexed store", typ)
	}
	return sv, nil
}

// updateFragments brings every fragment up to date with the render's
// input: it renders the entries that are new or dirty (in parallel when
// there are many), drops the entries of objects that are gone and reuses
// the rest. The caller holds the Set's lock.
func (s *Set) updateFragments(ctx context.Context, in *Input, res resourcesMap, values map[string]any, out *Output) error {
	c := s.cache
	var jobs []*job
	for _, fs := range c.states {
		sv, err := fragmentStore(res, fs.f.forEach)
		if err != nil {
			return &Error{Kind: KindFragment, Template: fs.f.name, Message: err.Error(), Err: err}
		}
		var store *index.Store
		var changes uint64
		if sv != nil {
			store, changes = sv.d.st, sv.d.st.Changes()
		}
		switch {
		case !fs.ready || store != fs.store:
			c.reset(fs)
			fs.store, fs.ready = store, true
			c.scan(fs, sv)
		case changes-fs.seenChanges != fs.reported:
			// Changes of the type that were not reported: compare
			// with every object.
			c.scan(fs, sv)
		case fs.reported > 0:
			c.applyTouched(fs)
		}
		fs.seenChanges, fs.reported = changes, 0
		clear(fs.touched)
		for _, e := range fs.pending {
			if !e.dirty || fs.entries[e.id] != e {
				continue // rendered since, or dropped
			}
			it, ok := fs.store.Item(e.id)
			if !ok {
				c.drop(e)
				fs.order = slices.DeleteFunc(fs.order, func(x *entry) bool { return x == e })
				continue
			}
			jobs = append(jobs, &job{e: e, it: it})
		}
		fs.pending = fs.pending[:0]
	}

	s.runJobs(ctx, in, res, values, jobs)

	var errs []error
	failed := 0
	for _, j := range jobs {
		e := j.e
		if j.err != nil {
			e.state.pending = append(e.state.pending, e) // still dirty: next time
			failed++
			if len(errs) < maxEntryErrors {
				errs = append(errs, j.err)
			}
			continue
		}
		c.unregister(e)
		e.state.setContent(e, j.out, j.parts)
		if len(e.errors) > 0 {
			e.state.withErrors--
		}
		if len(j.errors) > 0 {
			e.state.withErrors++
		}
		if !slices.Equal(e.errors, j.errors) {
			c.errVer++
		}
		e.errors, e.deps, e.rev, e.dirty = j.errors, j.deps, j.it.Rev, false
		c.register(e)
		out.FragmentsRendered = append(out.FragmentsRendered, EntryRef{Fragment: e.state.f.name, ID: e.id})
	}
	out.FragmentsReused = -len(jobs)
	for _, fs := range c.states {
		out.FragmentsReused += len(fs.order)
	}
	if failed > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("render fragments: %w", err)
		}
		if failed > len(errs) {
			errs = append(errs, fmt.Errorf("%w: and %d more fragment entries failed", ErrTemplate, failed-len(errs)))
		}
		return errors.Join(errs...)
	}
	return nil
}

// fragmentsFunc is the type of the fragments() global, so that
// fragmentsOutput can tell it from a name a template rebound.
type fragmentsFunc func(*exec.VarArgs) (any, error)

// fragmentsOutput replaces `{{ fragments("name") }}` and
// `{{ fragments("name", "part") }}` written as they are (no filter, no
// condition) in an output: it writes the entries to the output one after
// the other instead of joining them into one string first. Where
// `fragments` is not the global (a template rebound the name) or
// autoescaping is on, it renders the original node.
type fragmentsOutput struct {
	name, part string
	orig       *nodes.Output
}

func (n *fragmentsOutput) Position() *tokens.Token { return n.orig.Start }
func (n *fragmentsOutput) String() string          { return n.orig.String() }

func (n *fragmentsOutput) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	st := stateOf(r.Environment.Context)
	fn, _ := r.Environment.Context.Get("fragments")
	if _, ok := fn.(fragmentsFunc); !ok || st == nil || r.Config.AutoEscape {
		_, err := r.Visit(n.orig)
		return err
	}
	fs, err := st.fragment(n.name)
	if err != nil {
		return fmt.Errorf("Unable to render expression at line %d: %w", n.orig.Start.Line, err)
	}
	st.readFragment(fs, n.part)
	return fs.writeJoined(r.Output, n.part)
}

// rewriteFragmentOutputs replaces, in list and the bodies of the for, if
// and macro blocks in it, every output node that is exactly
// `{{ fragments("literal") }}` by a fragmentsOutput.
func rewriteFragmentOutputs(list []nodes.Node) {
	for i, n := range list {
		switch x := n.(type) {
		case *nodes.Output:
			if name, part, ok := fragmentsCall(x); ok {
				list[i] = &nodes.ControlStructureBlock{Location: x.Start, Name: "fragments", ControlStructure: &fragmentsOutput{name: name, part: part, orig: x}}
			}
		case *nodes.ControlStructureBlock:
			switch cs := x.ControlStructure.(type) {
			case *forNode:
				rewriteWrapper(cs.BodyWrapper)
				rewriteWrapper(cs.EmptyWrapper)
			case *ifNode:
				for _, w := range cs.Wrappers {
					rewriteWrapper(w)
				}
			case *macroNode:
				rewriteWrapper(cs.Wrapper)
			}
		}
	}
}

func rewriteWrapper(w *nodes.Wrapper) {
	if w != nil {
		rewriteFragmentOutputs(w.Nodes)
	}
}

// fragmentsCall reports whether o is `{{ fragments("name") }}` or
// `{{ fragments("name", "part") }}` and returns the name and part.
func fragmentsCall(o *nodes.Output) (name, part string, ok bool) {
	if o.Condition != nil || o.Alternative != nil {
		return "", "", false
	}
	call, ok := o.Expression.(*nodes.Call)
	if !ok || call.Parent != nil || len(call.Args) < 1 || len(call.Args) > 2 || len(call.Kwargs) > 0 {
		return "", "", false
	}
	fn, ok := call.Func.(*nodes.Name)
	if !ok || fn.Name.Val != "fragments" {
		return "", "", false
	}
	var lits []string
	for _, a := range call.Args {
		lit, ok := a.(*nodes.String)
		if !ok {
			return "", "", false
		}
		lits = append(lits, lit.Val)
	}
	if len(lits) == 2 {
		if lits[1] == "" {
			return "", "", false
		}
		part = lits[1]
	}
	return lits[0], part, true
}

// runJobs renders every job, on up to GOMAXPROCS goroutines.
func (s *Set) runJobs(ctx context.Context, in *Input, res resourcesMap, values map[string]any, jobs []*job) {
	workers := min(runtime.GOMAXPROCS(0), len(jobs)/parallelMin)
	if workers <= 1 {
		for _, j := range jobs {
			s.renderEntry(ctx, in, res, values, j)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				s.renderEntry(ctx, in, res, values, jobs[i])
			}
		})
	}
	wg.Wait()
}

// noFragments answers fragments() and fragment() inside a fragment.
func noFragments(*exec.VarArgs) (any, error) {
	return nil, errors.New("fragments() and fragment() cannot be used inside a fragment")
}

// renderEntry renders one fragment entry with its own state, recording
// what it reads.
func (s *Set) renderEntry(ctx context.Context, in *Input, res resourcesMap, values map[string]any, j *job) {
	f := j.e.state.f
	if err := ctx.Err(); err != nil {
		j.err = fmt.Errorf("render fragment %q: %w", f.name, err)
		return
	}
	defer func() {
		if p := recover(); p != nil {
			j.err = &Error{Kind: KindFragment, Template: f.name, Object: j.e.id, Message: fmt.Sprintf("panic while rendering: %v", p)}
		}
	}()
	rec := &reads{}
	view := newValuesView(values)
	st := &renderState{ctx: ctx, in: in, parts: map[string]*strings.Builder{}}
	st.data = exec.NewContext(map[string]any{
		"obj":            objectMap(j.it.Object()),
		"id":             j.e.id,
		"resources":      res.recording(rec, false),
		"values":         view,
		"register_error": st.registerError,
		"fetch":          st.fetch,
		"fragments":      noFragments,
		"fragment":       noFragments,
		stateKey:         st,
	})
	var b strings.Builder
	b.Grow(len(j.e.out) + 64)
	if err := f.tpl.Execute(&b, st.data); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			j.err = fmt.Errorf("render fragment %q: %w", f.name, cerr)
			return
		}
		e := runtimeError(KindFragment, f.name, err)
		e.Object = j.e.id
		j.err = e
		return
	}
	j.out, j.parts, j.errors, j.deps = b.String(), partsOf(st.parts), st.errors, rec.deps(view)
}

// registerEntryErrors registers the errors of every entry, fragment by
// fragment (by name) and entry by entry (by id), before the outputs'.
func (c *fragmentCache) registerEntryErrors(st *renderState) {
	for _, fs := range c.states {
		if fs.withErrors == 0 {
			continue
		}
		for _, e := range fs.order {
			for _, re := range e.errors {
				st.addError(re)
			}
		}
	}
}

func (c *fragmentCache) state(name string) *fragState {
	i, ok := slices.BinarySearchFunc(c.states, name, func(fs *fragState, n string) int { return strings.Compare(fs.f.name, n) })
	if !ok {
		return nil
	}
	return c.states[i]
}

// fragmentsFunction is fragments(name[, part]): the main output (or the
// part) of every entry of the fragment joined in id order.
func (st *renderState) fragmentsFunction(args *exec.VarArgs) (any, error) {
	if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("fragments(name[, part]) takes one or two arguments"))
	}
	fs, err := st.fragment(args.Args[0].String())
	if err != nil {
		return nil, err
	}
	part := ""
	if len(args.Args) == 2 {
		part = args.Args[1].String()
	}
	st.readFragment(fs, part)
	return fs.joinedOutput(part), nil
}

// fragmentFunction is fragment(name, id[, part]): the fragment's main
// output (or the part) rendered for one object, "" when there is no such
// object.
func (st *renderState) fragmentFunction(args *exec.VarArgs) (any, error) {
	if len(args.Args) < 2 || len(args.Args) > 3 || len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("fragment(name, id[, part]) takes two or three arguments"))
	}
	fs, err := st.fragment(args.Args[0].String())
	if err != nil {
		return nil, err
	}
	part := ""
	if len(args.Args) == 3 {
		part = args.Args[2].String()
	}
	st.readFragment(fs, part)
	if e := fs.entries[args.Args[1].String()]; e != nil {
		return e.part(part), nil
	}
	return "", nil
}

func (st *renderState) fragment(name string) (*fragState, error) {
	var fs *fragState
	if st.frags != nil {
		fs = st.frags.state(name)
	}
	if fs == nil {
		return nil, fmt.Errorf("no fragment named %q", name)
	}
	return fs, nil
}
