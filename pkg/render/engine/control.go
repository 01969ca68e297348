package engine

import (
	"fmt"
	"strings"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The for, if and macro control structures below replace gonja's with the
// same semantics and fewer allocations. gonja gives every loop item two
// child renderers (each with a copied Config, Environment and Context) and
// a third while filtering, runs every if body in a child scope that it then
// copies back into the parent, and gives every macro call a child renderer
// plus one evaluation per parameter name. Here a loop item gets one child
// scope that shares the Config (no control structure writes to a shared
// Config: autoescape copies its own), an if body runs in the scope it is
// in (which is what copying the child scope back amounts to), and a macro
// knows its parameter names from compile time.

// scope returns a child renderer of r with a fresh variable scope.
func scope(r *exec.Renderer) *exec.Renderer {
	// One allocation for the renderer and its environment.
	s := &struct {
		r   exec.Renderer
		env exec.Environment
	}{
		r: exec.Renderer{Config: r.Config, Template: r.Template, RootNode: r.RootNode, Output: r.Output, Loader: r.Loader},
		env: exec.Environment{
			Context:           r.Environment.Context.Inherit(),
			Filters:           r.Environment.Filters,
			Tests:             r.Environment.Tests,
			ControlStructures: r.Environment.ControlStructures,
			Methods:           r.Environment.Methods,
		},
	}
	s.r.Environment = &s.env
	return &s.r
}

// forNode is `{% for %}`. Recursive loops keep gonja's implementation.
type forNode struct {
	*controlStructures.ForControlStructure
	// reuse is set when nothing in the body (outside nested scopes) can
	// keep the iteration's renderer past the iteration (a macro or call
	// block captures it): the iterations then share one renderer, each
	// with a fresh variable scope.
	reuse bool
}

// reusableScope reports whether the nodes of w, run in one scope, keep no
// reference to their renderer.
func reusableScope(w *nodes.Wrapper) bool {
	if w == nil {
		return true
	}
	for _, n := range w.Nodes {
		b, ok := n.(*nodes.ControlStructureBlock)
		if !ok {
			continue
		}
		switch cs := b.ControlStructure.(type) {
		case *ifNode:
			for _, w := range cs.Wrappers {
				if !reusableScope(w) {
					return false
				}
			}
		case *forNode, *fastSetNode, *setNode, *doNode, *partNode, *includeNode, *fragmentsOutput:
		default:
			return false
		}
	}
	return true
}

func forParser(builtin parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := builtin(p, args)
		if err != nil {
			return nil, err
		}
		fcs, ok := cs.(*controlStructures.ForControlStructure)
		if !ok {
			return nil, fmt.Errorf("for: unexpected node %T", cs)
		}
		if fcs.Recursive {
			return fcs, nil
		}
		return &forNode{ForControlStructure: fcs, reuse: reusableScope(fcs.BodyWrapper)}, nil
	}
}

type loopItem struct {
	key, value any
}

// listItems returns the items of the lists the engine iterates itself
// (ok is false for other values): gonja's Iterate boxes every item.
func listItems(obj any) ([]loopItem, bool) {
	var items []loopItem
	switch x := obj.(type) {
	case []any:
		items = make([]loopItem, len(x))
		for i, v := range x {
			items[i].key = v
		}
	case *listValue:
		if x == nil {
			return nil, false
		}
		items = make([]loopItem, len(*x))
		for i, v := range *x {
			items[i].key = v
		}
	case []string:
		items = make([]loopItem, len(x))
		for i, v := range x {
			items[i].key = v
		}
	case []int:
		items = make([]loopItem, len(x))
		for i, v := range x {
			items[i].key = v
		}
	default:
		return nil, false
	}
	return items, true
}

func (n *forNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	objAny := evalAny(r, n.ObjectEvaluator)
	if err, ok := objAny.(error); ok {
		return err
	}
	// Materialise the items first, applying the loop's if filter, as
	// gonja does: loop.length and loop.last count the filtered items.
	var items []loopItem
	if all, ok := listItems(objAny); ok && n.Value == "" {
		items = all
	} else {
		obj := toValue(objAny)
		obj.Iterate(func(_, count int, key, value *exec.Value) bool {
			if items == nil {
				items = make([]loopItem, 0, count)
			}
			it := loopItem{key: key}
			if n.Value != "" && !key.IsString() && key.Len() == 2 {
				key.Iterate(func(idx, _ int, k, _ *exec.Value) bool {
					if idx == 0 {
						it.key = k
					} else {
						it.value = k
					}
					return true
				}, func() {})
			} else if value != nil {
				it.value = value
			}
			items = append(items, it)
			return true
		}, func() {})
	}
	if n.IfCondition != nil {
		kept := items[:0]
		for _, it := range items {
			filter := scope(r)
			ctx := filter.Environment.Context
			ctx.Set(n.Key, it.key)
			if it.value != nil {
				ctx.Set(n.Value, it.value)
			}
			if truth(evalAny(filter, n.IfCondition)) {
				kept = append(kept, it)
			}
		}
		items = kept
	}

	if len(items) == 0 {
		if n.EmptyWrapper != nil {
			return walk(scope(r), n.EmptyWrapper)
		}
		return nil
	}
	depth := 1
	if parent, ok := r.Environment.Context.Get("loop"); ok {
		if p, ok := parent.(*loopInfo); ok {
			depth = p.depth + 1
		}
	}
	loop := &loopInfo{items: items, depth: depth}
	var sub *exec.Renderer
	for idx, it := range items {
		if sub == nil || !n.reuse {
			sub = scope(r)
		} else {
			sub.Environment.Context = r.Environment.Context.Inherit()
		}
		ctx := sub.Environment.Context
		ctx.Set(n.Key, it.key)
		if it.value != nil {
			ctx.Set(n.Value, it.value)
		}
		ctx.Set("loop", loop)
		loop.index0 = idx
		if err := walk(sub, n.BodyWrapper); err != nil {
			if isLoopControl[*controlStructures.LoopBreakError](err) {
				break
			}
			if isLoopControl[*controlStructures.LoopContinueError](err) {
				continue
			}
			return err
		}
	}
	return nil
}

// isLoopControl reports whether err is, or wraps, a break or continue.
func isLoopControl[T error](err error) bool {
	for e := err; e != nil; {
		if _, ok := e.(T); ok {
			return true
		}
		switch x := e.(type) {
		case interface{ Unwrap() error }:
			e = x.Unwrap()
		case interface{ Cause() error }:
			e = x.Cause()
		default:
			return false
		}
	}
	return false
}

// loopInfo is the `loop` variable of a for loop, with the attributes of
// gonja's (Jinja2's): index, index0, revindex, revindex0, first, last,
// length, depth, depth0, previtem, nextitem, cycle() and changed().
type loopInfo struct {
	items     []loopItem
	index0    int
	depth     int
	lastValue *exec.Value
}

func (l *loopInfo) item(i int) *exec.Value {
	if i < 0 || i >= len(l.items) {
		return exec.AsValue(nil)
	}
	it := l.items[i]
	if it.value != nil {
		return exec.AsValue([2]*exec.Value{toValue(it.key), toValue(it.value)})
	}
	return toValue(it.key)
}

// GetAttribute implements exec.AttributeGetter.
func (l *loopInfo) GetAttribute(name string) (*exec.Value, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return exec.AsValue(l.index0 + 1), true
	case "index0":
		return exec.AsValue(l.index0), true
	case "revindex":
		return exec.AsValue(n - l.index0), true
	case "revindex0":
		return exec.AsValue(n - l.index0 - 1), true
	case "first":
		return exec.AsValue(l.index0 == 0), true
	case "last":
		return exec.AsValue(l.index0 == n-1), true
	case "length":
		return exec.AsValue(n), true
	case "depth":
		return exec.AsValue(l.depth), true
	case "depth0":
		return exec.AsValue(l.depth - 1), true
	case "previtem", "PrevItem":
		return l.item(l.index0 - 1), true
	case "nextitem", "NextItem":
		return l.item(l.index0 + 1), true
	case "cycle", "Cycle":
		return exec.AsValue(func(va *exec.VarArgs) *exec.Value {
			if len(va.Args) == 0 {
				return exec.AsValue("")
			}
			return va.Args[l.index0%len(va.Args)]
		}), true
	case "changed", "Changed":
		return exec.AsValue(func(va *exec.VarArgs) *exec.Value {
			var current *exec.Value
			if len(va.Args) == 1 {
				current = va.Args[0]
			} else {
				items := make([]any, 0, len(va.Args))
				for _, a := range va.Args {
					items = append(items, a.Interface())
				}
				current = exec.AsValue(items)
			}
			same := l.lastValue != nil && current.EqualValueTo(l.lastValue)
			l.lastValue = current
			return exec.AsValue(!same)
		}), true
	}
	return exec.AsValue(nil), false
}

// ifNode is `{% if %}...{% elif %}...{% else %}...{% endif %}`. Its bodies
// run in the enclosing scope: Jinja2's if opens no scope, and gonja's
// copies every name its child scope set back into the parent.
type ifNode struct {
	*controlStructures.IfControlStructure
}

func ifParser(builtin parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := builtin(p, args)
		if err != nil {
			return nil, err
		}
		ics, ok := cs.(*controlStructures.IfControlStructure)
		if !ok {
			return nil, fmt.Errorf("if: unexpected node %T", cs)
		}
		return &ifNode{ics}, nil
	}
}

func (n *ifNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	for i, cond := range n.Conditions {
		v := evalAny(r, cond)
		if err, ok := v.(error); ok {
			return err
		}
		if truth(v) {
			return walk(r, n.Wrappers[i])
		}
		if i == len(n.Conditions)-1 && len(n.Wrappers) > i+1 {
			return walk(r, n.Wrappers[i+1])
		}
	}
	return nil
}

// macroNode is `{% macro name(params) %}`: executing it binds name to a
// function in the current scope, as gonja does.
type macroNode struct {
	*controlStructures.MacroControlStructure
	params []string // parameter names, in order
}

func macroParser(builtin parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := builtin(p, args)
		if err != nil {
			return nil, err
		}
		mcs, ok := cs.(*controlStructures.MacroControlStructure)
		if !ok {
			return nil, fmt.Errorf("macro: unexpected node %T", cs)
		}
		n := &macroNode{MacroControlStructure: mcs, params: make([]string, len(mcs.Kwargs))}
		for i, kw := range mcs.Kwargs {
			s, ok := kw.Key.(*nodes.String)
			if !ok {
				return nil, fmt.Errorf("macro %s: parameter %d has no name", mcs.Name, i)
			}
			n.params[i] = s.Val
		}
		return n, nil
	}
}

func (n *macroNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	r.Environment.Context.Set(n.Name, exec.Macro(func(params *exec.VarArgs) *exec.Value {
		return n.call(r, params)
	}))
	return nil
}

// call runs the macro defined in r's scope with params, with the argument
// binding and errors of gonja's macros.
func (n *macroNode) call(r *exec.Renderer, params *exec.VarArgs) *exec.Value {
	args := make([]*exec.Value, len(n.params))
	bound := min(len(params.Args), len(n.params))
	copy(args, params.Args[:bound])
	var varArgs []any
	if len(params.Args) > len(n.params) {
		if n.VarArgsName == "" {
			return exec.AsValue(fmt.Errorf("macro '%s' received %d arguments but expected only %d", n.Name, len(params.Args), len(n.params)))
		}
		for _, a := range params.Args[len(n.params):] {
			varArgs = append(varArgs, a.Interface())
		}
	}
	var extra map[string]any
	if n.KwArgsName != "" {
		extra = map[string]any{}
	}
kwargs:
	for kw, v := range params.KwArgs {
		for i, name := range n.params {
			if name == kw {
				if args[i] != nil {
					return exec.AsValue(fmt.Errorf("macro '%s' received '%s' argument twice", n.Name, kw))
				}
				args[i] = v
				continue kwargs
			}
		}
		if extra == nil {
			return exec.AsValue(fmt.Errorf("macro '%s' takes no keyword argument '%s'", n.Name, kw))
		}
		extra[kw] = v.Interface()
	}
	for i := range args {
		if args[i] == nil {
			v := toValue(evalAny(r, n.Kwargs[i].Value))
			if v.IsError() {
				return exec.AsValue(fmt.Errorf("macro '%s' failed to evaluate '%s': %s", n.Name, n.Kwargs[i].Value.String(), v))
			}
			args[i] = v
		}
	}
	var out strings.Builder
	sub := scope(r)
	sub.Output = &out
	ctx := sub.Environment.Context
	for i, name := range n.params {
		ctx.Set(name, args[i])
	}
	if n.VarArgsName != "" {
		if varArgs == nil {
			varArgs = []any{}
		}
		ctx.Set(n.VarArgsName, varArgs)
	}
	if n.KwArgsName != "" {
		ctx.Set(n.KwArgsName, extra)
	}
	if caller, ok := r.Environment.Context.Get("__gonja_caller__"); ok && caller != nil {
		ctx.Set("caller", caller)
		r.Environment.Context.Set("__gonja_caller__", nil)
	}
	if err := walk(sub, n.Wrapper); err != nil {
		return exec.AsValue(fmt.Errorf("Unable to execute macro '%s': %w", n.Name, err))
	}
	return exec.AsSafeValue(out.String())
}

// fastSetNode is `{% set %}` evaluated by the engine (see eval.go), with
// gonja's semantics and messages plus setNode's: a list bound to a name
// becomes a listValue, and resource data and values are read-only.
type fastSetNode struct {
	location    *tokens.Token
	base        string // root name of an attribute or item target
	target      nodes.Expression
	expression  nodes.Expression
	condition   nodes.Expression
	alternative nodes.Expression
	body        *nodes.Wrapper
}

func (n *fastSetNode) Position() *tokens.Token { return n.location }
func (n *fastSetNode) String() string {
	return fmt.Sprintf("SetControlStructure(Line=%d Col=%d)", n.location.Line, n.location.Col)
}

// fastSetParser is gonja's set parser building a fastSetNode.
func fastSetParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	n := &fastSetNode{location: p.Current()}
	if tok := args.Current(tokens.Name); tok != nil && args.Peek(tokens.Dot, tokens.LeftBracket) != nil {
		n.base = tok.Val
	}
	ident, err := args.ParseVariableOrLiteral()
	if err != nil {
		return nil, fmt.Errorf("unable to parse identifier: %w", err)
	}
	switch ident.(type) {
	case *nodes.Name, *nodes.Call, *nodes.GetItem, *nodes.GetAttribute:
		n.target = ident
	default:
		return nil, fmt.Errorf(`unexpected set target %s`, ident)
	}
	if args.Match(tokens.Assign) == nil {
		if !args.End() {
			return nil, args.Error("Expected '=' or end of tag for block-set.", args.Current())
		}
		wrapper, endargs, err := p.WrapUntil("endset")
		if err != nil {
			return nil, err
		}
		if !endargs.End() {
			return nil, endargs.Error("endset takes no arguments", nil)
		}
		n.body = wrapper
		return n, nil
	}
	if n.expression, err = args.ParseExpression(); err != nil {
		return nil, err
	}
	condition, alternative, err := args.ParseCondition()
	if err != nil {
		return nil, err
	}
	if condition != nil {
		n.condition = condition
		if alternative == nil {
			return nil, args.Error("Malformed 'set' if else condition", args.Current())
		}
		n.alternative = alternative
	}
	if !args.End() {
		return nil, args.Error("Malformed 'set' tag args.", args.Current())
	}
	return n, nil
}

func (n *fastSetNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	if n.base != "" {
		v, _ := r.Environment.Context.Get(n.base)
		switch v.(type) {
		case objectMap, resourcesMap, *storeValue, valuesView:
			return fmt.Errorf("cannot set an attribute or item of %q: resource data and values are read-only (use namespace())", n.base)
		}
	}
	var value any
	switch {
	case n.body != nil:
		var buf strings.Builder
		sub := r.Inherit()
		sub.Output = &buf
		if err := sub.ExecuteWrapper(n.body); err != nil {
			return err
		}
		value = buf.String()
	case n.condition != nil && n.alternative != nil:
		cond := evalAny(r, n.condition)
		if err, ok := cond.(error); ok {
			return err
		}
		if truth(cond) {
			value = evalAny(r, n.expression)
		} else {
			value = evalAny(r, n.alternative)
		}
	default:
		value = evalAny(r, n.expression)
	}
	if err, ok := value.(error); ok {
		return err
	}
	value = bare(value)
	switch t := n.target.(type) {
	case *nodes.Name:
		if l, ok := newList(value); ok {
			value = l
		}
		r.Environment.Context.Set(t.Name.Val, value)
	case *nodes.GetAttribute:
		target := evalAny(r, t.Node)
		if isErr(target) {
			return wrapf(target, `Unable to evaluate target %s`, t)
		}
		if m, ok := target.(map[string]any); ok && m != nil && t.Attribute != "" {
			if value == nil {
				delete(m, t.Attribute)
			} else {
				m[t.Attribute] = value
			}
			return nil
		}
		if err := toValue(target).Set(exec.AsValue(t.Attribute), value); err != nil {
			return fmt.Errorf(`Unable to set value on "%s": %w`, t.Attribute, err)
		}
	case *nodes.GetItem:
		target := evalAny(r, t.Node)
		if isErr(target) {
			return wrapf(target, `Unable to evaluate target %s`, t)
		}
		arg := evalAny(r, t.Arg)
		if isErr(arg) {
			return wrapf(target, `Unable to evaluate argument %s`, t.Arg)
		}
		if err := toValue(target).Set(toValue(arg), value); err != nil {
			return fmt.Errorf(`Unable to set value on "%s": %w`, t.Arg, err)
		}
	default:
		return fmt.Errorf(`Illegal set target node %s`, t)
	}
	return nil
}

// doNode is `{% do expr %}` evaluated by the engine.
type doNode struct {
	location   *tokens.Token
	expression nodes.Expression
}

func (n *doNode) Position() *tokens.Token { return n.location }
func (n *doNode) String() string {
	return fmt.Sprintf("DoControlStructure(Line=%d Col=%d)", n.location.Line, n.location.Col)
}

func doParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	n := &doNode{location: p.Current()}
	expr, err := args.ParseExpression()
	if err != nil {
		return nil, err
	}
	n.expression = expr
	if !args.End() {
		return nil, args.Error("Malformed do-tag args.", args.Current())
	}
	return n, nil
}

func (n *doNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	if err, ok := evalAny(r, n.expression).(error); ok {
		return err
	}
	return nil
}
