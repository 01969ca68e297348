package engine

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// maxIncludeDepth bounds nested includes, so a snippet that includes itself
// fails with an error instead of exhausting the stack.
const maxIncludeDepth = 64

// maxRange bounds the length of range(), so a template bug cannot exhaust
// memory.
const maxRange = 1 << 20

// newEnvironment builds the gonja environment of one Set: gonja's
// builtins plus weft's filters, globals, list methods and the include and
// set control structures bound to s. Every field is set: gonja panics on
// some nil sets.
func newEnvironment(s *Set, snippets map[string]string, fast bool) *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	for name, fn := range map[string]exec.FilterFunction{
		"log":       filterLog,
		"b64decode": filterB64Decode,
		"b64encode": filterB64Encode,
		"get_path":  filterGetPath,
	} {
		mustDo(filters.Register(name, fn))
	}
	lengthFn, _ := builtins.Filters.Get("length")
	length := func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		if sv, ok := in.Interface().(*storeValue); ok {
			if err := params.Take(); err != nil {
				return exec.AsValue(exec.ErrInvalidCall(err))
			}
			return exec.AsValue(len(sv.readAll()))
		}
		return lengthFn(e, in, params)
	}
	mustDo(filters.Replace("length", length))
	mustDo(filters.Replace("count", length))

	tests := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)

	names := make(map[string]bool, len(snippets))
	for name := range snippets {
		names[name] = true
	}
	controls := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	mustDo(controls.Replace("include", includeParser(s, names)))
	builtinSet, _ := builtins.ControlStructures.Get("set")
	mustDo(controls.Replace("set", setParser(builtinSet)))
	mustDo(controls.Register("part", partParser))
	if fast {
		mustDo(controls.Replace("set", fastSetParser))
		mustDo(controls.Replace("do", doParser))
		builtinFor, _ := builtins.ControlStructures.Get("for")
		mustDo(controls.Replace("for", forParser(builtinFor)))
		builtinIf, _ := builtins.ControlStructures.Get("if")
		mustDo(controls.Replace("if", ifParser(builtinIf)))
		builtinMacro, _ := builtins.ControlStructures.Get("macro")
		mustDo(controls.Replace("macro", macroParser(builtinMacro)))
	}
	for _, name := range controlStructureNames {
		if cs, ok := controls.Get(name); ok {
			mustDo(controls.Replace(name, withLine(cs)))
		}
	}

	methods := builtins.Methods
	methods.List = listMethods
	methods.Str = strMethods()

	globals := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	globals.Set("range", rangeFunction)

	return &exec.Environment{
		Context:           globals,
		Filters:           filters,
		Tests:             tests,
		ControlStructures: controls,
		Methods:           methods,
	}
}

func mustDo(err error) {
	if err != nil {
		panic(err) // only reachable through a programming error in this file
	}
}

// controlStructureNames are gonja's control structures.
var controlStructureNames = []string{
	"autoescape", "block", "call", "do", "extends", "filter", "for", "from", "if",
	"import", "include", "macro", "raw", "set", "trans", "with", "break", "continue", "part",
}

// withLine gives a control structure's parse errors a position when gonja
// reports none (for example `{% if %}`): the line where the tag ends.
func withLine(inner parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		at := p.Current()
		cs, err := inner(p, args)
		if err != nil {
			var se *parser.SyntaxError
			if at != nil && at.Line > 0 && (!errors.As(err, &se) || se.Line == 0) {
				msg := err.Error()
				if se != nil {
					msg = se.Message
				}
				return nil, &parser.SyntaxError{Message: msg, Line: at.Line, Column: at.Col}
			}
		}
		return cs, err
	}
}

// memLoader serves template sources from memory. Includes never go through
// it (the include control structure uses compiled snippets); gonja's
// import and extends do.
type memLoader map[string]string

func (m memLoader) Read(name string) (io.Reader, error) {
	text, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("no template or snippet named %q", name)
	}
	return strings.NewReader(text), nil
}

func (m memLoader) Resolve(name string) (string, error) {
	if _, ok := m[name]; !ok {
		return "", fmt.Errorf("no template or snippet named %q", name)
	}
	return name, nil
}

func (m memLoader) Inherit(string) (loaders.Loader, error) { return m, nil }

// includeNode is `{% include expr [ignore missing] [with|without context] %}`.
type includeNode struct {
	set            *Set
	location       *tokens.Token
	name           nodes.Expression
	ignoreMissing  bool
	withoutContext bool
}

func (n *includeNode) Position() *tokens.Token { return n.location }
func (n *includeNode) String() string          { return fmt.Sprintf("include %s", n.name) }

func includeParser(s *Set, known map[string]bool) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		n := &includeNode{set: s, location: p.Current()}
		expr, err := args.ParseExpression()
		if err != nil {
			return nil, err
		}
		n.name = expr
		if args.MatchName("ignore") != nil {
			if args.MatchName("missing") == nil {
				return nil, args.Error("expected 'missing' after 'ignore'", args.Current())
			}
			n.ignoreMissing = true
		}
		if tok := args.MatchName("with", "without"); tok != nil {
			if args.MatchName("context") == nil {
				return nil, args.Error(fmt.Sprintf("expected 'context' after '%s'", tok.Val), args.Current())
			}
			n.withoutContext = tok.Val == "without"
		}
		if !args.End() {
			return nil, args.Error("malformed include: expected a snippet name, then optionally 'ignore missing' and 'with context' or 'without context'", args.Current())
		}
		if lit, ok := expr.(*nodes.String); ok && !known[lit.Val] && !n.ignoreMissing {
			return nil, args.Error(fmt.Sprintf("include of unknown snippet %q", lit.Val), lit.Location)
		}
		return n, nil
	}
}

// snippetError marks an error raised while rendering an included snippet.
// Its text carries the snippet's name, which runtimeError reads back after
// gonja has wrapped (and sometimes flattened) the error chain.
type snippetError struct {
	name string
	err  error
}

func (e *snippetError) Error() string { return fmt.Sprintf("in snippet %q: %s", e.name, e.err) }
func (e *snippetError) Unwrap() error { return e.err }

func (n *includeNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) (err error) {
	st := stateOf(r.Environment.Context)
	if st == nil {
		return errors.New("include outside of a render")
	}
	if err := st.ctx.Err(); err != nil {
		return err
	}
	nameValue := evalAny(r, n.name)
	if err, ok := nameValue.(error); ok {
		return err
	}
	name := str(nameValue)
	tpl := n.set.snippets[name]
	if tpl == nil {
		if n.ignoreMissing {
			return nil
		}
		return fmt.Errorf("include of unknown snippet %q", name)
	}
	if st.depth >= maxIncludeDepth {
		return &snippetError{name: name, err: fmt.Errorf("includes nested deeper than %d (a snippet including itself?)", maxIncludeDepth)}
	}
	st.depth++
	defer func() {
		st.depth--
		if p := recover(); p != nil {
			err = &snippetError{name: name, err: fmt.Errorf("panic while rendering: %v", p)}
		}
	}()
	var ctx *exec.Context
	if n.withoutContext {
		ctx = n.set.env.Context.Inherit().Update(st.data).Inherit()
	} else {
		ctx = r.Environment.Context.Inherit()
	}
	env := &exec.Environment{
		Context:           ctx,
		Filters:           r.Environment.Filters,
		Tests:             r.Environment.Tests,
		ControlStructures: r.Environment.ControlStructures,
		Methods:           r.Environment.Methods,
	}
	var sub *exec.Renderer
	if len(tpl.Root().Blocks) > 0 {
		// NewRenderer binds `self` to the snippet's blocks.
		sub = exec.NewRenderer(env, r.Output, n.set.snippetCfg, r.Loader, tpl)
	} else {
		// No blocks: skip NewRenderer's copy of the config and its `self`.
		sub = &exec.Renderer{Config: n.set.snippetCfg, Environment: env, Template: tpl, RootNode: tpl.Root(), Output: r.Output, Loader: r.Loader}
	}
	if err := sub.Execute(); err != nil {
		return &snippetError{name: name, err: err}
	}
	return nil
}

// setNode wraps gonja's set: after `{% set name = <list> %}` the name is
// bound to a listValue, giving lists Python's reference semantics, and
// `{% set x.attr = ... %}` is refused when x is resource data or values,
// which are shared by concurrent renders (use namespace() for that).
type setNode struct {
	exec.ControlStructure
	name string // target of `set name = ...`
	base string // base name of `set base.attr = ...` or `set base[key] = ...`
}

func setParser(builtin parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		var name, base string
		if tok := args.Current(tokens.Name); tok != nil {
			switch {
			case args.Peek(tokens.Assign) != nil:
				name = tok.Val
			case args.Peek(tokens.Dot, tokens.LeftBracket) != nil:
				base = tok.Val
			}
		}
		cs, err := builtin(p, args)
		if err != nil {
			return nil, err
		}
		ecs, ok := cs.(exec.ControlStructure)
		if !ok {
			return nil, fmt.Errorf("set: unexpected node %T", cs)
		}
		return &setNode{ControlStructure: ecs, name: name, base: base}, nil
	}
}

func (n *setNode) Execute(r *exec.Renderer, tag *nodes.ControlStructureBlock) error {
	if n.base != "" {
		v, _ := r.Environment.Context.Get(n.base)
		switch v.(type) {
		case objectMap, resourcesMap, *storeValue, valuesView:
			return fmt.Errorf("cannot set an attribute or item of %q: resource data and values are read-only (use namespace())", n.base)
		}
	}
	if err := n.ControlStructure.Execute(r, tag); err != nil {
		return err
	}
	if n.name == "" {
		return nil
	}
	v, ok := r.Environment.Context.Get(n.name)
	if !ok {
		return nil
	}
	if l, ok := newList(v); ok {
		r.Environment.Context.Set(n.name, l)
	}
	return nil
}

// rangeFunction is Python's range returning a list (gonja's feeds a
// channel from a goroutine that leaks when the result is not consumed).
func rangeFunction(args *exec.VarArgs) (any, error) {
	if len(args.KwArgs) > 0 {
		return nil, exec.ErrInvalidCall(errors.New("range() takes no keyword arguments"))
	}
	start, stop, step := 0, 0, 1
	for _, a := range args.Args {
		if !a.IsInteger() {
			return nil, exec.ErrInvalidCall(fmt.Errorf("range() arguments must be integers, got %s", a.String()))
		}
	}
	switch len(args.Args) {
	case 1:
		stop = args.Args[0].Integer()
	case 2:
		start, stop = args.Args[0].Integer(), args.Args[1].Integer()
	case 3:
		start, stop, step = args.Args[0].Integer(), args.Args[1].Integer(), args.Args[2].Integer()
	default:
		return nil, exec.ErrInvalidCall(errors.New("range() takes 1 to 3 arguments: [start, ]stop[, step]"))
	}
	if step == 0 {
		return nil, exec.ErrInvalidCall(errors.New("range() step must not be zero"))
	}
	n := 0
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		n = (start - stop - step - 1) / -step
	}
	if n > maxRange {
		return nil, fmt.Errorf("range() of %d items exceeds the limit of %d", n, maxRange)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// filterLog is Ansible's log filter: log(x, base=e).
func filterLog(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var base float64
	if err := params.Take(
		exec.KeywordArgument("base", exec.AsValue(math.E), exec.NumberArgument(&base)),
	); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	if !in.IsNumber() {
		return exec.AsValue(fmt.Errorf("log: %q is not a number", in.String()))
	}
	x := in.Float()
	if x <= 0 || base <= 0 || base == 1 {
		return exec.AsValue(fmt.Errorf("log(%s, %s): math domain error", in.String(), exec.AsValue(base).String()))
	}
	if base == math.E {
		return exec.AsValue(math.Log(x))
	}
	return exec.AsValue(math.Log(x) / math.Log(base))
}

// filterB64Decode decodes standard base64 (padded or not) to a string, as
// needed for Kubernetes Secret data.
func filterB64Decode(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if err := params.Take(); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	if !in.IsString() {
		return exec.AsValue(fmt.Errorf("b64decode: input is not a string"))
	}
	s := strings.TrimSpace(in.String())
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		var rerr error
		if b, rerr = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "=")); rerr != nil {
			return exec.AsValue(fmt.Errorf("b64decode: %w", err))
		}
	}
	return exec.AsValue(string(b))
}

func filterB64Encode(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if err := params.Take(); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	return exec.AsValue(base64.StdEncoding.EncodeToString([]byte(in.String())))
}

// filterGetPath answers `"name" | get_path("map"|"file"|"cert"|"config")`
// with Input.Path.
func filterGetPath(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var kind string
	if err := params.Take(
		exec.PositionalArgument("kind", nil, exec.StringArgument(&kind)),
	); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	k := Kind(kind)
	if !k.valid() {
		return exec.AsValue(fmt.Errorf("get_path: unknown kind %q (want map, file, cert or config)", kind))
	}
	st := stateOf(e.Environment.Context)
	if st == nil || st.in.Path == nil {
		return exec.AsValue(errors.New("get_path: no path resolver configured for this render"))
	}
	p, err := st.in.Path(k, in.String())
	if err != nil {
		return exec.AsValue(fmt.Errorf("get_path(%q, %q): %w", in.String(), kind, err))
	}
	return exec.AsValue(p)
}
