// Package engine compiles and renders one target's templates: the
// haproxy.cfg (or any config), maps, files and certificates of the seed's
// configuration format, written in Jinja2 syntax and run by gonja v2.
//
// Contract:
//
//   - Compile parses every snippet, fragment and output exactly once.
//     Renders reuse the parsed trees; `{% include "name" %}` executes the
//     compiled snippet and never re-parses. A syntax error, an include of a
//     snippet that does not exist (when the name is a literal), an unknown
//     filter, fragments("x") or fragment("x", id) of a fragment that does
//     not exist (when the name is a literal), fragments("x", "p") of a
//     part fragment x does not declare (when both are literals and x's
//     includes are literal), fragments() or fragment() inside a fragment
//     and a part tag in an output are compile errors.
//   - Render runs the outputs in the order of Spec.Outputs and returns one
//     File per output in that order, plus the errors templates registered
//     with register_error (in registration order, exact duplicates dropped).
//     A failing output yields an *Error naming it (and the snippet and line
//     when known); every failing output is reported (errors.Join), and a
//     panic inside gonja becomes an *Error, never a crash.
//   - Every error about a template matches ErrTemplate (errors.Is) and is,
//     or wraps, an *Error (errors.As).
//   - A Set holds what it keeps between renders (fragment entries and
//     outputs, see outputs.go): Render and Invalidate take its lock, so
//     renders of one Set run one at a time, and Render may be called from
//     any goroutine. The outputs of one render see one consistent set of
//     entries.
//   - ctx is checked before each output, at each include and before each
//     fragment entry.
//
// Fragments: Spec.Fragments are templates rendered once per object of a
// resource type (Fragment.ForEach) and cached. The outputs read them with
// fragments("name"), every entry joined in object-id order, and
// fragment("name", id), one entry ("" when there is no such object). In a
// fragment `obj` is the object and `id` its id, beside everything an output
// sees. A fragment can also write named parts, `{% part "p" %}...{% endpart %}`
// (see parts.go), read with fragments("name", "p") and fragment("name",
// id, "p"), so one entry per object can work something out once and feed
// several outputs. What is cached, per entry: the output text and parts,
// the errors it
// registered, and what it read through `resources` and `values`: objects by
// id (store.get(id), store['id']), get_indexed lookups (the type and key
// tuple), whole types (items(), keys(), values(), len(), the length filter,
// get_indexed() without keys, printing a store), and values by name (or all
// of them, through items/keys/values). The reverse maps from each of those
// to the entries that read it let Invalidate mark exactly the entries a
// change affects. Render renders the entries that are new or marked (in
// parallel, on up to GOMAXPROCS goroutines, when there are many), drops the
// entries of objects that are gone, and reuses every other entry. Outputs
// are cached the same way, with the fragment parts they read (outputs.go):
// an output runs again only when something it read changed.
// `{{ fragments(name) }}` writes the cached join of the entries to the
// output (joins.go: blocks of entries, so one changed entry re-joins one
// block); used in an expression, it is the whole join, rebuilt only after
// a change. Render also notices, without Invalidate,
// changes of a fragment's own type that were not reported (the store's
// change count disagrees: it then compares every object's revision), values
// that differ from the last render's, and a store replaced by another; it
// cannot notice an object read by another entry changing, which is what
// Invalidate is for. Errors registered by fragment
// entries come before the outputs', fragment by fragment (by name) and
// entry by entry (by id). A failing entry fails the render with an *Error
// naming the fragment and the object; it is rendered again next time. Data
// behind Resources that is not an *index.Store is assumed not to change
// between renders of a Set with fragments. Input.Path must be safe for
// concurrent use.
//
// What templates see: `resources` (type name to *index.Store, or any other
// value the caller puts there; a store answers items(), keys(), values(),
// get(id[, default]), get_indexed(keys...), len(), store['id'] and the
// length filter; iterate it with items()) and `values`. Objects reach
// templates as the stored maps themselves, answering get/items/keys/values
// without copying (gonja's generic dict methods deep-copy the receiver);
// as in Python a method name wins over a key of the same name, which stays
// reachable as obj['items']. Resource data and values are read-only:
// `{% set obj.attr = ... %}` on them is an error (use namespace()).
//
// Besides gonja's builtins, the environment has the filters log,
// b64decode, b64encode and get_path, the globals register_error,
// fragments and fragment, a range
// that returns a list (bounded), Python list methods on lists bound with
// set (append, extend, insert, pop, remove, index, count, clear, copy,
// reverse) with reference semantics across scopes, and an include that
// honours "with context" (the default) and "without context" and is
// bounded in depth.
//
// Whitespace follows Jinja2's defaults (no trim_blocks, no lstrip_blocks)
// except that an output and a fragment keep their final newline; a snippet
// drops its final newline like a Jinja2 template without
// keep_trailing_newline, so `{% include %}` can be used mid-line.
//
// Speed: gonja's for, if, macro, set and do are replaced by
// implementations with the same semantics that allocate less (see
// control.go), the expressions they evaluate and the `{{ }}` in their
// bodies are evaluated by the engine on plain values, falling back to
// gonja's code for the forms and types it does not answer itself (see
// eval.go), and an include of a snippet without blocks skips gonja's
// per-renderer setup.
//
// Data should be plain map[string]any / []any with integers as int (see
// index.Decode): gonja prints a float64 80 as "80.0", and `2 ** 3` as
// "8.0" (Jinja2: 8); use the int filter where an integer is meant.
package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Kind is the kind of an output.
type Kind string

// Output kinds.
const (
	KindConfig Kind = "config" // the main configuration (haproxy_config)
	KindMap    Kind = "map"
	KindFile   Kind = "file"
	KindCert   Kind = "cert"
	// KindFragment marks errors in a fragment; it is not an output kind.
	KindFragment Kind = "fragment"
)

func (k Kind) valid() bool {
	switch k {
	case KindConfig, KindMap, KindFile, KindCert:
		return true
	}
	return false
}

// Template is one output template.
type Template struct {
	Kind Kind
	Name string
	Text string
}

// Spec is everything one target renders: includable snippets, fragments
// (by name) and outputs.
type Spec struct {
	Snippets  map[string]string
	Fragments map[string]Fragment
	Outputs   []Template
}

// Input is the data of one render.
type Input struct {
	// Resources maps a type name to an *index.Store (or any map-like
	// value); templates see it as `resources`.
	Resources map[string]any
	// Values are exported values; templates see them as `values`.
	Values map[string]any
	// Path returns where an output of the given kind and name will live;
	// it answers the get_path filter.
	Path func(kind Kind, name string) (string, error)
	// Fetch returns the full body of an object its source keeps on demand
	// (only metadata is in the index); it answers fetch(type, namespace,
	// name). Nil: such objects cannot be fetched.
	Fetch func(ctx context.Context, typ, namespace, name string) (map[string]any, error)
}

// File is one rendered output.
type File struct {
	Kind    Kind
	Name    string
	Content []byte
}

// RegisteredError is one call of register_error(type, id, message).
type RegisteredError struct {
	Type    string
	ID      string
	Message string
}

// Output is the result of a render.
type Output struct {
	Files  []File
	Errors []RegisteredError
	// ValuesRead are the names of the values the render read; AllValues is
	// set when it listed them all. A value outside both changes nothing.
	ValuesRead []string
	AllValues  bool
	// FragmentsRendered are the fragment entries this render rendered
	// (new or invalidated), by fragment name and id; FragmentsReused
	// counts the entries it took from the cache.
	FragmentsRendered []EntryRef
	FragmentsReused   int
	// OutputsRendered are the outputs this render ran; OutputsReused
	// counts those it took from the cache. Files holds all of them, in
	// order either way; a reused File's Content is shared with the cache
	// and must not be modified.
	OutputsRendered []OutputRef
	OutputsReused   int
}

// OutputRef names one output.
type OutputRef struct {
	Kind Kind
	Name string
}

// ErrTemplate is matched (errors.Is) by every template error.
var ErrTemplate = errors.New("template error")

// Error is a compile or render error in a template.
type Error struct {
	// Kind and Template name the output; for an error while compiling a
	// snippet Kind is "" and Template is the snippet's name.
	Kind     Kind
	Template string
	// Snippet is the innermost snippet the failure is in, if any.
	Snippet string
	// Object is the id of the object a failing fragment was rendered for.
	Object string
	// Line is the 1-based line in Snippet when set, else in Template;
	// 0 when unknown.
	Line    int
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Kind == KindFragment:
		fmt.Fprintf(&b, "fragment %q", e.Template)
		if e.Object != "" {
			fmt.Fprintf(&b, " object %q", e.Object)
		}
		if e.Snippet != "" {
			fmt.Fprintf(&b, ": snippet %q", e.Snippet)
		}
	case e.Kind == "" && e.Snippet != "":
		fmt.Fprintf(&b, "snippet %q", e.Snippet)
	case e.Snippet != "":
		fmt.Fprintf(&b, "template %q: snippet %q", e.Template, e.Snippet)
	default:
		fmt.Fprintf(&b, "template %q", e.Template)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " line %d", e.Line)
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

// Is makes errors.Is(err, ErrTemplate) true.
func (e *Error) Is(target error) bool { return target == ErrTemplate }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Set is a compiled Spec.
type Set struct {
	// fast: the engine evaluates expressions (eval.go), top-level
	// outputs included; unset only in tests that compare with gonja.
	fast       bool
	env        *exec.Environment
	snippetCfg *config.Config
	outputCfg  *config.Config
	snippets   map[string]*exec.Template
	outputs    []*output
	fragments  []*fragment // by name

	// mu is held by Render and Invalidate: it guards what the Set keeps
	// between renders.
	mu         sync.Mutex
	cache      *fragmentCache // nil without fragments
	outs       *outputCache
	lastValues map[string]any // the values of the last render
	haveValues bool
	// kept are the objects the outputs read, decoded, for the next render.
	kept keptTrees
	// errors are the registered errors of the last render, at errorsKey.
	errors     []RegisteredError
	errorsKey  errorsKey
	haveErrors bool
}

type output struct {
	Template
	tpl      *exec.Template
	lastSize atomic.Int64
}

// Compile parses every snippet and output of spec once.
func Compile(spec Spec) (*Set, error) {
	return compile(spec, true)
}

// compile is Compile; with fast unset it keeps gonja's own for, if and
// macro (the tests compare the two).
func compile(spec Spec, fast bool) (*Set, error) {
	s := &Set{
		fast:       fast,
		snippetCfg: config.New(),
		outputCfg:  config.New(),
		snippets:   make(map[string]*exec.Template, len(spec.Snippets)),
	}
	s.outputCfg.KeepTrailingNewline = true
	s.env = newEnvironment(s, spec.Snippets, fast)

	sources := make(memLoader, len(spec.Snippets)+len(spec.Fragments)+len(spec.Outputs))
	for name, text := range spec.Snippets {
		if name == "" {
			return nil, &Error{Message: "snippet with empty name"}
		}
		sources[name] = text
	}
	seen := map[string]bool{}
	for i, o := range spec.Outputs {
		if !o.Kind.valid() {
			return nil, &Error{Kind: o.Kind, Template: o.Name, Message: fmt.Sprintf("unknown kind %q (want config, map, file or cert)", o.Kind)}
		}
		if o.Name == "" {
			return nil, &Error{Kind: o.Kind, Message: fmt.Sprintf("output %d has no name", i)}
		}
		key := string(o.Kind) + "\x00" + o.Name
		if seen[key] {
			return nil, &Error{Kind: o.Kind, Template: o.Name, Message: fmt.Sprintf("%s %q declared twice", o.Kind, o.Name)}
		}
		seen[key] = true
		// Output identifiers cannot collide with snippet names: a NUL
		// byte cannot appear in an include name written in a template.
		sources[outputID(i)] = o.Text
	}
	fragNames := make([]string, 0, len(spec.Fragments))
	for name, f := range spec.Fragments {
		if name == "" {
			return nil, &Error{Kind: KindFragment, Message: "fragment with empty name"}
		}
		if f.ForEach == "" {
			return nil, &Error{Kind: KindFragment, Template: name, Message: "fragment without a type to render for (for_each)"}
		}
		fragNames = append(fragNames, name)
		sources[fragmentID(name)] = f.Text
	}
	slices.Sort(fragNames)

	// Report errors in a stable order: snippets by name, then outputs in
	// spec order.
	names := make([]string, 0, len(spec.Snippets))
	for name := range spec.Snippets {
		names = append(names, name)
	}
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		tpl, err := s.parse(name, spec.Snippets[name], s.snippetCfg, sources)
		if err != nil {
			errs = append(errs, compileError("", name, name, err))
			continue
		}
		rewriteFragmentOutputs(tpl.Root().Nodes)
		s.ownOutputs(tpl)
		s.snippets[name] = tpl
	}
	for _, name := range fragNames {
		f := spec.Fragments[name]
		tpl, err := s.parse(fragmentID(name), f.Text, s.outputCfg, sources)
		if err == nil {
			err = checkFragmentCalls(f.Text, s.outputCfg, nil)
		}
		if err != nil {
			errs = append(errs, compileError(KindFragment, name, "", err))
			continue
		}
		s.ownOutputs(tpl)
		parts, complete := declaredParts(f.Text, spec.Snippets, s.outputCfg)
		s.fragments = append(s.fragments, &fragment{name: name, forEach: f.ForEach, tpl: tpl, parts: parts, anyPart: !complete})
	}
	known := make(map[string]*fragment, len(s.fragments))
	for _, f := range s.fragments {
		known[f.name] = f
	}
	for i, o := range spec.Outputs {
		tpl, err := s.parse(outputID(i), o.Text, s.outputCfg, sources)
		if err == nil {
			err = checkFragmentCalls(o.Text, s.outputCfg, known)
		}
		if err == nil {
			err = checkNoPart(o.Text, s.outputCfg)
		}
		if err != nil {
			errs = append(errs, compileError(o.Kind, o.Name, "", err))
			continue
		}
		rewriteFragmentOutputs(tpl.Root().Nodes)
		s.ownOutputs(tpl)
		s.outputs = append(s.outputs, &output{Template: o, tpl: tpl})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(s.fragments) > 0 {
		s.cache = newFragmentCache(s.fragments)
	}
	s.outs = newOutputCache(s.outputs)
	return s, nil
}

func outputID(i int) string { return "\x00output/" + strconv.Itoa(i) }

func fragmentID(name string) string { return "\x00fragment/" + name }

func (s *Set) parse(id, text string, cfg *config.Config, loader memLoader) (*exec.Template, error) {
	if err := s.checkFilters(text, cfg); err != nil {
		return nil, err
	}
	return exec.NewTemplate(id, cfg, loader, s.env)
}

// checkFilters reports the first use of a filter the environment does not
// have, so a typo fails at compile time rather than on the render that
// first reaches it.
func (s *Set) checkFilters(text string, cfg *config.Config) error {
	stream := tokens.LexAll(text, cfg)
	prevPipe := false
	for !stream.End() {
		tok := stream.Next()
		if prevPipe && tok.Type == tokens.Name && !s.env.Filters.Exists(tok.Val) {
			return &parser.SyntaxError{Message: fmt.Sprintf("no filter named %q", tok.Val), Raw: tok.Val, Line: tok.Line, Column: tok.Col}
		}
		prevPipe = tok.Type == tokens.Pipe
	}
	return nil
}

// checkFragmentCalls reports a call of fragments() or fragment() with a
// literal name that is not a fragment (known), or with a literal part the
// fragment does not declare, or any such call in a fragment (known is nil).
func checkFragmentCalls(text string, cfg *config.Config, known map[string]*fragment) error {
	toks := lexAll(text, cfg)
	for i, tok := range toks {
		if tok.Type != tokens.Name || (tok.Val != "fragments" && tok.Val != "fragment") {
			continue
		}
		if i+1 >= len(toks) || toks[i+1].Type != tokens.LeftParenthesis || i > 0 && toks[i-1].Type == tokens.Dot {
			continue
		}
		if known == nil {
			return &parser.SyntaxError{Message: tok.Val + "() cannot be used inside a fragment", Raw: tok.Val, Line: tok.Line, Column: tok.Col}
		}
		if i+2 >= len(toks) || toks[i+2].Type != tokens.String {
			continue
		}
		name := toks[i+2]
		f := known[name.Val]
		if f == nil {
			return &parser.SyntaxError{Message: fmt.Sprintf("no fragment named %q", name.Val), Raw: name.Val, Line: name.Line, Column: name.Col}
		}
		if part := literalPart(toks[i+3:], tok.Val == "fragment"); part != nil && part.Val != "" && !f.anyPart && !f.parts[part.Val] {
			return &parser.SyntaxError{Message: fmt.Sprintf("fragment %q has no part %q", name.Val, part.Val), Raw: part.Val, Line: part.Line, Column: part.Col}
		}
	}
	return nil
}

// literalPart returns the part argument of fragments("name", "part") or,
// with skipID, fragment("name", id, "part") when it is a literal string
// closing the call; toks follow the name.
func literalPart(toks []*tokens.Token, skipID bool) *tokens.Token {
	if len(toks) == 0 || toks[0].Type != tokens.Comma {
		return nil
	}
	toks = toks[1:]
	if skipID {
		// The id is any expression: find the comma at depth 0.
		depth := 0
		for len(toks) > 0 && (depth > 0 || toks[0].Type != tokens.Comma) {
			switch toks[0].Type {
			case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
				depth++
			case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
				if depth == 0 {
					return nil
				}
				depth--
			}
			toks = toks[1:]
		}
		if len(toks) == 0 {
			return nil
		}
		toks = toks[1:]
	}
	if len(toks) < 2 || toks[0].Type != tokens.String || toks[1].Type != tokens.RightParenthesis {
		return nil
	}
	return toks[0]
}

// checkNoPart reports a part tag in an output's own text.
func checkNoPart(text string, cfg *config.Config) error {
	toks := lexAll(text, cfg)
	for i := 0; i+1 < len(toks); i++ {
		if toks[i].Type == tokens.BlockBegin && toks[i+1].Type == tokens.Name && toks[i+1].Val == "part" {
			return &parser.SyntaxError{Message: errPartOutsideFragment.Error(), Raw: "part", Line: toks[i+1].Line, Column: toks[i+1].Col}
		}
	}
	return nil
}

// compileError turns a gonja parse error into an *Error.
func compileError(kind Kind, template, snippet string, err error) *Error {
	e := &Error{Kind: kind, Template: template, Snippet: snippet, Err: err}
	var se *parser.SyntaxError
	if errors.As(err, &se) {
		e.Line = se.Line
		e.Message = se.Message
		if se.Raw != "" {
			e.Message += fmt.Sprintf(" (near %q)", se.Raw)
		}
		if se.Column > 0 {
			e.Message += fmt.Sprintf(" at column %d", se.Column)
		}
		return e
	}
	// gonja prefixes parse errors with the whole template source; keep
	// only what follows it.
	msg := err.Error()
	if i := strings.LastIndex(msg, "': "); i >= 0 && strings.HasPrefix(msg, "failed to parse template '") {
		msg = msg[i+3:]
	}
	e.Message = msg
	return e
}

// Outputs returns the compiled outputs' templates in order.
func (s *Set) Outputs() []Template {
	out := make([]Template, len(s.outputs))
	for i, o := range s.outputs {
		out[i] = o.Template
	}
	return out
}

// stateKey names the per-render state in the render context. It is not an
// identifier, so no template can reach it.
const stateKey = "weft:render"

// renderState is the mutable state of one Render call. One render runs on
// one goroutine, so it needs no locking.
type renderState struct {
	ctx     context.Context
	in      *Input
	data    *exec.Context
	depth   int
	errors  []RegisteredError
	seenErr map[RegisteredError]bool
	frags   *fragmentCache // the outputs' view of the fragments
	// parts are the named parts of a fragment entry (nil in an output).
	parts map[string]*strings.Builder
	// fragReads are the fragment parts an output read; fetched is set
	// when it called fetch().
	fragReads smallSet[fragRef]
	fetched   bool
}

// readFragment records that the output read a part of fs.
func (st *renderState) readFragment(fs *fragState, part string) {
	st.fragReads.add(fragRef{fs: fs, part: part})
}

func stateOf(c *exec.Context) *renderState {
	v, _ := c.Get(stateKey)
	st, _ := v.(*renderState)
	return st
}

// fetch implements fetch(type, namespace, name): the full body of an object
// kept on demand. Inside a fragment it is not recorded as a dependency: read
// the object from resources as well, so its changes re-render the fragment.
func (st *renderState) fetch(args *exec.VarArgs) (any, error) {
	if len(args.Args) != 3 || len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("fetch(type, namespace, name) takes exactly 3 arguments"))
	}
	typ, ns, name := args.Args[0].String(), args.Args[1].String(), args.Args[2].String()
	st.fetched = true
	if st.in.Fetch == nil {
		return nil, fmt.Errorf("fetch %s %s/%s: no source keeps objects on demand here", typ, ns, name)
	}
	obj, err := st.in.Fetch(st.ctx, typ, ns, name)
	if err != nil {
		return nil, fmt.Errorf("fetch %s %s/%s: %w", typ, ns, name, err)
	}
	return wrapObject(obj), nil
}

func (st *renderState) registerError(args *exec.VarArgs) (any, error) {
	if len(args.Args) != 3 || len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("register_error(type, id, message) takes exactly 3 arguments"))
	}
	st.addError(RegisteredError{Type: args.Args[0].String(), ID: args.Args[1].String(), Message: args.Args[2].String()})
	return "", nil
}

// addError records e unless it was recorded before.
func (st *renderState) addError(e RegisteredError) {
	if st.seenErr == nil {
		st.seenErr = map[RegisteredError]bool{}
	}
	if !st.seenErr[e] {
		st.seenErr[e] = true
		st.errors = append(st.errors, e)
	}
}

// Render renders every output of the Set from in, reusing the fragment
// entries and outputs that nothing they read has changed for (see
// Invalidate). Renders of one Set run one at a time.
func (s *Set) Render(ctx context.Context, in Input) (*Output, error) {
	values := in.Values
	if values == nil {
		values = map[string]any{}
	}
	out := &Output{Files: make([]File, 0, len(s.outputs))}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept.start()
	defer s.kept.end()
	res := newResources(in.Resources, &s.kept)
	s.checkValues(values)
	cacheable := s.outs.check(res)
	if s.cache != nil {
		if err := s.updateFragments(ctx, &in, res, values, out); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, os := range s.outs.states {
		o := os.o
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("render %s %q: %w", o.Kind, o.Name, err)
		}
		if cacheable && os.fresh() {
			out.Files = append(out.Files, File{Kind: o.Kind, Name: o.Name, Content: os.content})
			out.OutputsReused++
			continue
		}
		st := &renderState{ctx: ctx, in: &in, frags: s.cache}
		content, d, err := s.renderOutput(st, res, values, o)
		if err != nil {
			s.outs.forget(os)
			if cerr := ctx.Err(); cerr != nil {
				return nil, fmt.Errorf("render %s %q: %w", o.Kind, o.Name, cerr)
			}
			errs = append(errs, err)
			continue
		}
		s.outs.store(os, content, st, d, cacheable)
		out.Files = append(out.Files, File{Kind: o.Kind, Name: o.Name, Content: content})
		out.OutputsRendered = append(out.OutputsRendered, OutputRef{Kind: o.Kind, Name: o.Name})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out.Errors = s.registeredErrors()
	out.ValuesRead, out.AllValues = s.valuesRead()
	return out, nil
}

var (
	snippetMarker = regexp.MustCompile(`in snippet "((?:[^"\\]|\\.)*)": `)
	lineRef       = regexp.MustCompile(`at line (\d+)`)
	noise         = []*regexp.Regexp{
		regexp.MustCompile(`unable to execute template: `),
		regexp.MustCompile(`Unable to execute controlStructure at line \d+: [^:]*?\(Line=\d+ Col=\d+\): `),
		regexp.MustCompile(`Unable to execute controlStructure at line \d+: include [^:]*: `),
		regexp.MustCompile(`Unable to (?:render expression|render condition|evaluation condition as boolean) at line \d+: `),
		regexp.MustCompile(`call\(\[[^\]]*\], map\[[^\]]*\]\): `),
	}
	filterNode = regexp.MustCompile(`unable to evaluate filter &\{<Token\[Name\] Val='(\w+)'[^}]*\}`)
	noneCall   = regexp.MustCompile(`invalid call to method '([^']+)' of : '[^']+' is not callable on ?$`)
)

// runtimeError turns a gonja execution error into an *Error: the innermost
// snippet the failure passed through, the innermost line gonja reported
// there, and the message without gonja's wrapping.
func runtimeError(kind Kind, name string, err error) *Error {
	e := &Error{Kind: kind, Template: name, Err: err}
	msg := err.Error()
	if m := snippetMarker.FindAllStringSubmatchIndex(msg, -1); len(m) > 0 {
		last := m[len(m)-1]
		name, uerr := strconv.Unquote(`"` + msg[last[2]:last[3]] + `"`)
		if uerr != nil {
			name = msg[last[2]:last[3]]
		}
		e.Snippet = name
		msg = msg[last[1]:]
	}
	if m := lineRef.FindAllStringSubmatch(msg, -1); len(m) > 0 {
		e.Line, _ = strconv.Atoi(m[len(m)-1][1])
	}
	for _, re := range noise {
		msg = re.ReplaceAllString(msg, "")
	}
	msg = filterNode.ReplaceAllString(msg, "filter '$1'")
	msg = noneCall.ReplaceAllString(msg, "cannot call method '$1' on None (an undefined or null value)")
	e.Message = strings.TrimSpace(msg)
	return e
}
