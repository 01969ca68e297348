package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins/methods/pystring"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The engine evaluates expressions itself where its control structures
// (for, if, set, do, include, and the outputs in their bodies and in
// parts) need a value, with gonja's semantics and messages but without
// boxing every intermediate result into an *exec.Value and calling
// functions through reflection. Values are plain Go values; an error
// value is an evaluation error, as in gonja. The common forms are answered
// directly: names, literals, attributes and items of objects, dicts,
// namespaces and lists, calls of the engine's functions and methods and of
// namespace(), the string methods isalnum, isascii, startswith, endswith
// and rstrip, the filters default, replace, lower, trim, length, join,
// unique, list and sort, the tests defined, none, integer, string and in,
// and the operators. Any other form, type or failure takes gonja's own
// code on the values already computed, so no part of an expression is
// evaluated twice (gonja evaluates the receiver of a string method twice:
// `l.pop().upper()` pops two items there, one here and in Jinja2). With
// autoescaping on (where gonja marks values safe) everything goes to
// gonja.
//
// Errors: an error value never becomes output. Where Jinja2 raises and
// gonja makes a value up (division or modulo by zero, an operand type the
// operator does not take, a failing item of a list or tuple literal), the
// engine returns an error, which the render reports with the template and
// the line. Outputs at a template's top level are evaluated here too
// (ownOutputs), and so are macro defaults and the bounds of slices. Left
// to gonja: the target of a slice (`(a - b)[1:]`), and the bodies of
// gonja's own structures (filter, with, call blocks) and of autoescaped
// templates.

// evalAny evaluates expr in r's scope to a plain value.
func evalAny(r *exec.Renderer, expr nodes.Node) any {
	if r.Config.AutoEscape {
		return plainOf(r.Eval(expr.(nodes.Expression)))
	}
	return eval(r, expr)
}

// safe is a value gonja marked safe (a macro's output, the safe filter):
// the escape and indent filters read the mark, so such values keep their
// *exec.Value and take gonja's code wherever they go.
type safe struct{ v *exec.Value }

// plainOf returns the plain value behind a gonja value.
func plainOf(v any) any {
	for {
		x, ok := v.(*exec.Value)
		if !ok {
			if rv, ok := v.(reflect.Value); ok {
				v = exec.ToValue(rv)
				continue
			}
			return v
		}
		if x == nil {
			return nil
		}
		if x.Safe && !x.IsNil() && !x.IsError() {
			return safe{x}
		}
		v = x.Interface()
	}
}

// toValue is exec.ToValue keeping the safe mark.
func toValue(v any) *exec.Value {
	if s, ok := v.(safe); ok {
		return s.v
	}
	return exec.ToValue(v)
}

// bare is v without the safe mark, as gonja stores values in variables
// and lists.
func bare(v any) any {
	if s, ok := v.(safe); ok {
		return s.v.Interface()
	}
	return v
}

// isErr reports whether v is an evaluation error.
func isErr(v any) bool {
	_, ok := v.(error)
	return ok
}

// errText is the text of v when it is an error ("" otherwise), as gonja's
// Value.Error.
func errText(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	return ""
}

// wrapf is gonja's errors.Wrapf(value, ...): the message, ": " and the
// text of cause.
func wrapf(cause any, format string, args ...any) error {
	return errors.New(fmt.Sprintf(format, args...) + ": " + errText(cause))
}

// truth is gonja's Value.IsTrue.
func truth(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case int:
		return x != 0
	case []any:
		return len(x) > 0
	case objectMap:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	case *listValue:
		return x != nil && len(*x) > 0
	}
	return toValue(v).IsTrue()
}

// str is gonja's Value.String.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case nil:
		return ""
	case bool:
		if x {
			return "True"
		}
		return "False"
	}
	return toValue(v).String()
}

// equal is gonja's Value.EqualValueTo.
func equal(a, b any) bool {
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x == y
		}
	case int:
		if y, ok := b.(int); ok {
			return x == y
		}
	case nil:
		switch b.(type) {
		case nil:
			return true
		case string, int, bool:
			return false
		}
	case bool:
		switch y := b.(type) {
		case bool:
			return x == y
		case nil, string:
			return false
		}
	}
	return toValue(a).EqualValueTo(toValue(b))
}

// eval is evalAny without the autoescape check.
func eval(r *exec.Renderer, node nodes.Node) any {
	switch n := node.(type) {
	case *nodes.String:
		return n.Val
	case *nodes.Integer:
		return n.Val
	case *nodes.Bool:
		return n.Val
	case *nodes.None:
		return nil
	case *nodes.Name:
		v, ok := r.Environment.Context.Get(n.Name.Val)
		if !ok && r.Config.StrictUndefined {
			return fmt.Errorf(`Unable to evaluate name "%s"`, n.Name.Val)
		}
		return plainOf(v)
	case *nodes.GetAttribute:
		return evalGetAttribute(r, n)
	case *nodes.GetItem:
		return evalGetItem(r, n)
	case *nodes.Call:
		return evalCall(r, n)
	case *nodes.FilteredExpression:
		return evalFiltered(r, n)
	case *nodes.BinaryExpression:
		return evalBinary(r, n)
	case *nodes.Negation:
		v := eval(r, n.Term)
		if isErr(v) {
			return v
		}
		return negate(v)
	case *nodes.TestExpression:
		return evalTest(r, n)
	case *nodes.List:
		return evalItems(r, n.Val)
	case *nodes.Dict:
		return evalDict(r, n)
	case *nodes.Tuple:
		return evalItems(r, n.Val)
	case *nodes.UnaryExpression:
		return evalUnary(r, n)
	case *nodes.GetSlice:
		// gonja slices; its bounds are checked here first, so that a
		// bound Jinja2 refuses (`l[1 // 0:]`) is an error and not a
		// value gonja made up.
		for _, b := range []nodes.Node{n.Start, n.End, n.Step} {
			if e, ok := b.(nodes.Expression); b == nil || ok && literal(e) {
				continue
			}
			if v := eval(r, b); isErr(v) {
				return wrapf(v, `unable to evaluate slice bound %s`, b)
			}
		}
	}
	return plainOf(r.Eval(node.(nodes.Expression)))
}

// evalItems evaluates the items of a list or tuple literal; an item that
// fails fails the literal (gonja keeps the error as an item and prints
// it).
func evalItems(r *exec.Renderer, items []nodes.Expression) any {
	l := make(exec.ValuesList, len(items))
	for i, e := range items {
		v := eval(r, e)
		if isErr(v) {
			return wrapf(v, `Unable to evaluate item %d %s`, i, e)
		}
		l[i] = toValue(v)
	}
	return l
}

// evalUnary is gonja's unary minus and plus, refusing a term that is not a
// number as Jinja2 does.
func evalUnary(r *exec.Renderer, n *nodes.UnaryExpression) any {
	v := eval(r, n.Term)
	if isErr(v) {
		return wrapf(v, `Unable to evaluate term %s`, n.Term)
	}
	x := toValue(v)
	if !numeric(x) {
		sign := "+"
		if n.Negative {
			sign = "-"
		}
		return fmt.Errorf("bad operand type for unary %s: '%s'", sign, pyType(x))
	}
	switch {
	case !n.Negative:
		return plainOf(number(x))
	case x.IsFloat():
		return -x.Float()
	}
	return -number(x).Integer()
}

func negate(v any) any {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case int:
		if x != 0 {
			return 0
		}
		return 1
	case []any:
		return len(x) == 0
	case *listValue:
		if x != nil {
			return len(*x) == 0
		}
	}
	return plainOf(toValue(v).Negate())
}

func evalDict(r *exec.Renderer, n *nodes.Dict) any {
	d := &exec.Dict{Pairs: make([]*exec.Pair, 0, len(n.Pairs))}
	pairs := make([]exec.Pair, len(n.Pairs))
	values := make([]exec.Value, 2*len(n.Pairs))
	for i, pair := range n.Pairs {
		var key *exec.Value
		if lit, ok := pair.Key.(*nodes.String); ok {
			// The literal's own string: nothing writes to dict keys.
			values[2*i] = exec.Value{Val: reflect.ValueOf(&lit.Val).Elem()}
			key = &values[2*i]
		} else {
			k := eval(r, pair.Key)
			if isErr(k) {
				return wrapf(wrapf(k, `Unable to evaluate key "%s"`, pair.Key), `Unable to evaluate pair "%s"`, pair)
			}
			key = valueAt(values, 2*i, k)
		}
		v := eval(r, pair.Value)
		if isErr(v) {
			return wrapf(wrapf(v, `Unable to evaluate value "%s"`, pair.Value), `Unable to evaluate pair "%s"`, pair)
		}
		pairs[i] = exec.Pair{Key: key, Value: valueAt(values, 2*i+1, v)}
		d.Pairs = append(d.Pairs, &pairs[i])
	}
	return d
}

// valueAt is toValue(v) stored in values[i] where v is a plain value
// (exec.ToValue(v) is then &exec.Value{Val: reflect.ValueOf(v)}).
func valueAt(values []exec.Value, i int, v any) *exec.Value {
	if _, ok := v.(safe); ok {
		return toValue(v)
	}
	values[i] = exec.Value{Val: reflect.ValueOf(v)}
	return &values[i]
}

var stringType = reflect.TypeFor[string]()

// getAttr is gonja's attribute lookup (GetAttribute, then GetItem): the
// value and whether it was found; when it was not, the value may be an
// error.
func getAttr(recv any, name string) (any, bool) {
	switch x := recv.(type) {
	case objectMap:
		switch name {
		case "get", "items", "keys", "values":
		default:
			if v, ok := x[name]; ok {
				return wrapObject(v), true
			}
			return nil, false
		}
	case map[string]any:
		if x != nil {
			if v, ok := x[name]; ok {
				return plainOf(v), true
			}
			return nil, false
		}
	case *exec.Dict:
		switch name {
		case "Keys", "Get", "String", "Pairs":
		default:
			if x != nil {
				for _, p := range x.Pairs {
					if k := p.Key.Val; k.IsValid() && k.Type() == stringType {
						if k.String() == name {
							return plainOf(p.Value), true
						}
					} else if p.Key.String() == name {
						return plainOf(p.Value), true
					}
				}
				return nil, false
			}
		}
	case *loopInfo:
		if x != nil {
			if v, ok := x.GetAttribute(name); ok {
				return plainOf(v), true
			}
		}
	}
	v := toValue(recv)
	attr, found := v.GetAttribute(name)
	if !found {
		attr, found = v.GetItem(name)
	}
	return plainOf(attr), found
}

// getItem is gonja's Value.GetItem.
func getItem(recv any, key any) (any, bool) {
	switch x := recv.(type) {
	case objectMap:
		if k, ok := key.(string); ok {
			if v, ok := x[k]; ok {
				return wrapObject(v), true
			}
		}
		return nil, false
	case map[string]any:
		if k, ok := key.(string); ok && x != nil {
			if v, ok := x[k]; ok {
				return plainOf(v), true
			}
			return nil, false
		}
	case []any:
		if i, ok := key.(int); ok {
			return listIndex(x, i)
		}
	case *listValue:
		if i, ok := key.(int); ok && x != nil {
			return listIndex(*x, i)
		}
	}
	item, found := toValue(recv).GetItem(key)
	return plainOf(item), found
}

// listIndex is gonja's item access on a list (a negative index counts from
// the end, -len excluded).
func listIndex(l []any, i int) (any, bool) {
	switch {
	case i >= 0 && len(l) > i:
		return plainOf(l[i]), true
	case i < 0 && len(l) > -i:
		return plainOf(l[len(l)+i]), true
	}
	return nil, false
}

func evalGetAttribute(r *exec.Renderer, n *nodes.GetAttribute) any {
	recv := eval(r, n.Node)
	return attribute(r, n, recv)
}

// attribute is gonja's evalGetAttribute once the target is evaluated.
func attribute(r *exec.Renderer, n *nodes.GetAttribute, recv any) any {
	if isErr(recv) {
		return wrapf(recv, `Unable to evaluate target %s`, n.Node)
	}
	var v any
	var found bool
	if n.Attribute != "" {
		v, found = getAttr(recv, n.Attribute)
		if !found {
			if isErr(v) {
				return wrapf(v, `Unable to evaluate %s`, n)
			}
			if r.Config.StrictUndefined {
				return fmt.Errorf(`Unable to evaluate %s: attribute '%s' not found`, n, n.Attribute)
			}
			return nil
		}
		return v
	}
	v, found = getItem(recv, n.Index)
	if !found {
		if isErr(v) {
			return wrapf(v, `Unable to evaluate %s`, n)
		}
		if r.Config.StrictUndefined {
			return fmt.Errorf(`Unable to evaluate %s: item %d not found`, n, n.Index)
		}
		return nil
	}
	return v
}

func evalGetItem(r *exec.Renderer, n *nodes.GetItem) any {
	value := eval(r, n.Node)
	if isErr(value) {
		return wrapf(value, `unable to evaluate target %s`, n.Node)
	}
	if n.Arg == nil {
		if r.Config.StrictUndefined {
			return wrapf(value, `argument is undefined to access: %s`, n.Node)
		}
		return nil
	}
	arg := eval(r, n.Arg)
	var key any
	switch a := arg.(type) {
	case string, int:
		key = a
	default:
		av := toValue(arg)
		switch {
		case av.IsString():
			key = av.String()
		case av.IsInteger():
			key = av.Integer()
		case av.IsNil() && r.Config.StrictUndefined:
			return wrapf(value, `argument is undefined to access: %s`, n.Node)
		default:
			return wrapf(value, `argument %s does not evaluate to string or integer in: %s`, n.Arg, n.Node)
		}
	}
	item, found := getItem(value, key)
	if k, ok := key.(string); !found && ok {
		var attr *exec.Value
		attr, found = toValue(value).GetAttribute(k)
		item = plainOf(attr)
	}
	if !found {
		if isErr(item) {
			return wrapf(item, `unable to evaluate %s`, n)
		}
		if r.Config.StrictUndefined {
			return fmt.Errorf(`unable to evaluate %s: item '%s' not found`, n, n.Arg)
		}
		return nil
	}
	return item
}

// args evaluates the arguments of a call, a filter or a test: the first
// error value, if any, and which argument (or keyword) failed.
func evalArgs(r *exec.Renderer, args []nodes.Expression, kwargs map[string]nodes.Expression) (*exec.VarArgs, any, nodes.Expression, string) {
	params := &exec.VarArgs{Args: make([]*exec.Value, 0, len(args))}
	if len(kwargs) > 0 {
		params.KwArgs = make(map[string]*exec.Value, len(kwargs))
	}
	for _, a := range args {
		v := eval(r, a)
		if isErr(v) {
			return nil, v, a, ""
		}
		params.Args = append(params.Args, toValue(v))
	}
	for k, a := range kwargs {
		v := eval(r, a)
		if isErr(v) {
			return nil, v, a, k
		}
		params.KwArgs[k] = toValue(v)
	}
	return params, nil, nil, ""
}

func evalCall(r *exec.Renderer, n *nodes.Call) any {
	ga, ok := n.Func.(*nodes.GetAttribute)
	if !ok || ga.Attribute == "" {
		return call(r, n, eval(r, n.Func), nil, false)
	}
	recv := eval(r, ga.Node)
	if !isErr(recv) {
		if v, ok := method(r, n, recv, ga.Attribute); ok {
			return v
		}
	}
	return call(r, n, attribute(r, ga, recv), recv, n.Parent == ga.Node)
}

// method answers the methods the engine knows on recv's type directly;
// ok is false for anything else.
func method(r *exec.Renderer, n *nodes.Call, recv any, name string) (any, bool) {
	switch x := recv.(type) {
	case objectMap:
		if name != "get" || len(n.Args) < 1 || len(n.Args) > 2 || len(n.Kwargs) > 0 {
			return nil, false
		}
		var key string
		if lit, ok := n.Args[0].(*nodes.String); ok {
			key = lit.Val
		} else {
			k := eval(r, n.Args[0])
			if isErr(k) {
				return wrapf(k, "unable to evaluate parameters"), true
			}
			key = str(k)
		}
		var def any
		if len(n.Args) == 2 {
			if def = eval(r, n.Args[1]); isErr(def) {
				return wrapf(def, "unable to evaluate parameters"), true
			}
		}
		if v, ok := x[key]; ok {
			return wrapObject(v), true
		}
		return bare(def), true
	case *listValue:
		if name != "append" || x == nil || len(n.Args) != 1 || len(n.Kwargs) > 0 {
			return nil, false
		}
		v := eval(r, n.Args[0])
		if isErr(v) {
			return wrapf(v, "unable to evaluate parameters"), true
		}
		*x = append(*x, bare(v))
		return nil, true
	case string:
		if v, ok := strMethod(n, x, name); ok {
			return v, true
		}
		m, ok := r.Environment.Methods.Str.Get(name)
		if !ok {
			return nil, false
		}
		params, failed, arg, kw := evalArgs(r, n.Args, n.Kwargs)
		if params == nil {
			if kw != "" {
				return wrapf(failed, "unable to evaluate parameter %s=%s", kw, arg), true
			}
			return wrapf(failed, "unable to evaluate parameter %s", arg), true
		}
		res, err := m(x, exec.AsValue(x), params)
		if err != nil {
			return fmt.Errorf("invalid call to method '%s' of %s: %s", name, x, err.Error()), true
		}
		return plainOf(res), true
	}
	return nil, false
}

// strMethod answers isalnum(), isascii() and startswith, endswith and
// rstrip with one literal argument as gonja's string methods do; ok is
// false for anything else.
func strMethod(n *nodes.Call, s string, name string) (any, bool) {
	if len(n.Kwargs) > 0 {
		return nil, false
	}
	if len(n.Args) == 0 {
		switch name {
		case "isalnum":
			return pystring.PyString(s).IsAlnum(), true
		case "isascii":
			return pystring.PyString(s).IsASCII(), true
		}
		return nil, false
	}
	lit, ok := n.Args[0].(*nodes.String)
	if !ok || len(n.Args) != 1 {
		return nil, false
	}
	start, end := 0, len(s)
	switch name {
	case "startswith":
		return pystring.PyString(s).StartsWith(lit.Val, &start, &end), true
	case "endswith":
		return pystring.PyString(s).EndsWith(pystring.New(lit.Val), &start, &end), true
	case "rstrip":
		return pystring.PyString(s).RStrip(lit.Val), true
	}
	return nil, false
}

// call is gonja's evalCall once the function is evaluated. parent is the
// evaluated receiver of a method call when haveParent is set.
func call(r *exec.Renderer, n *nodes.Call, fn any, parent any, haveParent bool) any {
	if !callable(fn) {
		ga, ok := n.Func.(*nodes.GetAttribute)
		if n.Parent == nil || !ok {
			return fmt.Errorf(`%s is not callable`, n.Func)
		}
		if !haveParent {
			parent = eval(r, n.Parent)
		}
		return callMethod(r, n, parent, ga.Attribute)
	}
	if isErr(fn) {
		return wrapf(fn, `unable to evaluate function '%s'`, n.Func)
	}
	name := func() string {
		if nameNode, ok := n.Func.(*nodes.Name); ok {
			return nameNode.Name.Val
		}
		return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	}
	switch f := fn.(type) {
	case func(*exec.VarArgs) (any, error):
		params, failed, _, _ := evalArgs(r, n.Args, n.Kwargs)
		if params == nil {
			return wrapf(failed, "unable to evaluate parameters")
		}
		res, err := f(params)
		if err != nil {
			return fmt.Errorf("invalid call to function '%s': %s", name(), err.Error())
		}
		return callResult(res, name)
	case func(*exec.Evaluator, *exec.VarArgs) map[string]any: // namespace()
		params, failed, _, _ := evalArgs(r, n.Args, n.Kwargs)
		if params == nil {
			return wrapf(failed, "unable to evaluate parameters")
		}
		return callResult(f(r.Evaluator(), params), name)
	case exec.Macro:
		params, failed, _, _ := evalArgs(r, n.Args, n.Kwargs)
		if params == nil {
			return wrapf(failed, "unable to evaluate parameters")
		}
		return callResult(plainOf(f(params)), name)
	}
	return reflectCall(r, n, toValue(fn), name)
}

var (
	typeOfVarArgs   = reflect.TypeFor[*exec.VarArgs]()
	typeOfEvaluator = reflect.TypeFor[*exec.Evaluator]()
	typeOfValuePtr  = reflect.TypeFor[*exec.Value]()
)

// reflectCall is the rest of gonja's evalCall: a function of any other
// type, called through reflection.
func reflectCall(r *exec.Renderer, n *nodes.Call, fn *exec.Value, name func() string) any {
	t := fn.Val.Type()
	var in []reflect.Value
	switch {
	case t.NumIn() == 1 && t.In(0) == typeOfVarArgs,
		t.NumIn() == 2 && t.In(0) == typeOfEvaluator && t.In(1) == typeOfVarArgs:
		params, failed, _, _ := evalArgs(r, n.Args, n.Kwargs)
		if params == nil {
			return wrapf(failed, "unable to evaluate parameters")
		}
		if params.KwArgs == nil {
			params.KwArgs = map[string]*exec.Value{}
		}
		if t.NumIn() == 2 {
			in = append(in, reflect.ValueOf(r.Evaluator()))
		}
		in = append(in, reflect.ValueOf(params))
	default:
		var err error
		if in, err = reflectParams(r, n, t); err != nil {
			return wrapf(err, "unable to evaluate parameters")
		}
	}
	out := fn.Val.Call(in)
	rv := out[0]
	if t.NumOut() == 2 {
		if e := out[1].Interface(); e != nil {
			err, ok := e.(error)
			if !ok {
				return fmt.Errorf("second return value of function '%s' is not an error", name())
			}
			return fmt.Errorf("invalid call to function '%s': %s", name(), err.Error())
		}
	}
	var v *exec.Value
	if rv.Type() != typeOfValuePtr {
		v = &exec.Value{Val: reflect.ValueOf(rv.Interface())}
	} else {
		res := rv.Interface().(*exec.Value)
		v = &exec.Value{Val: res.Val, Safe: res.Safe}
	}
	if !v.Val.IsValid() {
		return nil
	}
	if v.IsError() {
		return fmt.Errorf("invalid call to function '%s': %s", name(), v.Error())
	}
	return plainOf(v)
}

// reflectParams is gonja's evalParams: the arguments of a function that
// takes them one by one.
func reflectParams(r *exec.Renderer, n *nodes.Call, t reflect.Type) ([]reflect.Value, error) {
	if len(n.Args) != t.NumIn() && !(len(n.Args) >= t.NumIn()-1 && t.IsVariadic()) {
		return nil, fmt.Errorf("function input argument count (%d) of '%s' must be equal to the calling argument count (%d)", t.NumIn(), n.String(), len(n.Args))
	}
	if t.NumOut() != 1 && t.NumOut() != 2 {
		return nil, fmt.Errorf("'%s' must have exactly 1 or 2 output arguments, the second argument must be of type error", n.String())
	}
	var params []reflect.Value
	for i, a := range n.Args {
		v := eval(r, a)
		if err, ok := v.(error); ok {
			return nil, err
		}
		arg := toValue(v)
		want := t.In(min(i, t.NumIn()-1))
		if t.IsVariadic() && i >= t.NumIn()-1 {
			want = t.In(t.NumIn() - 1).Elem()
		}
		if want == typeOfValuePtr {
			params = append(params, reflect.ValueOf(arg))
			continue
		}
		if want != reflect.TypeOf(arg.Interface()) && want.Kind() != reflect.Interface {
			if !t.IsVariadic() {
				return nil, fmt.Errorf("function input argument %d of '%s' must be of type %s or *gonja.Value (not %T)", i, n.String(), want.String(), arg.Interface())
			}
			return nil, fmt.Errorf("function variadic input argument of '%s' must be of type %s or *gonja.Value (not %T)", n.String(), want.String(), arg.Interface())
		}
		params = append(params, reflect.ValueOf(arg.Interface()))
	}
	for _, p := range params {
		if p.Kind() == reflect.Invalid {
			return nil, errors.New("calling a function using an invalid parameter")
		}
	}
	return params, nil
}

// callResult is gonja's handling of a function's result.
func callResult(res any, name func() string) any {
	switch x := res.(type) {
	case nil:
		return nil
	case error:
		return fmt.Errorf("invalid call to function '%s': %s", name(), x.Error())
	}
	return res
}

// callable is gonja's Value.IsCallable.
func callable(fn any) bool {
	switch fn.(type) {
	case nil, string, int, bool, error, objectMap, map[string]any, []any:
		return false
	case func(*exec.VarArgs) (any, error), exec.Macro, func(*exec.Evaluator, *exec.VarArgs) map[string]any:
		return true
	}
	return toValue(fn).IsCallable()
}

// callMethod is gonja's evalMethod with the receiver evaluated.
func callMethod(r *exec.Renderer, n *nodes.Call, parentValue any, method string) any {
	if isErr(parentValue) {
		return wrapf(parentValue, "unable to evaluate '%s'", n.Parent)
	}
	params, failed, arg, kw := evalArgs(r, n.Args, n.Kwargs)
	if params == nil {
		if kw != "" {
			return wrapf(failed, "unable to evaluate parameter %s=%s", kw, arg)
		}
		return wrapf(failed, "unable to evaluate parameter %s", arg)
	}
	parent := toValue(parentValue)
	var result any
	err := fmt.Errorf("unknown method '%s' for '%s'", method, parent.String())
	methods := r.Environment.Methods
	switch {
	case parent.IsString():
		if m, ok := methods.Str.Get(method); ok {
			result, err = m(parent.String(), parent, params)
		}
	case parent.IsBool():
		if m, ok := methods.Bool.Get(method); ok {
			result, err = m(parent.Bool(), parent, params)
		}
	case parent.IsFloat():
		if m, ok := methods.Float.Get(method); ok {
			result, err = m(parent.Float(), parent, params)
		}
	case parent.IsInteger():
		if m, ok := methods.Int.Get(method); ok {
			result, err = m(parent.Integer(), parent, params)
		}
	case parent.IsDict():
		if m, ok := methods.Dict.Get(method); ok {
			dict := parent.ToGoSimpleType(false)
			if err, ok := dict.(error); err != nil && ok {
				return fmt.Errorf("failed to cast '%s' to a Go type: %s", parent.String(), err)
			}
			goMap, ok := dict.(map[string]any)
			if !ok {
				return fmt.Errorf("failed to cast '%s' to map[string]interface{}: %s", parent.String(), err)
			}
			result, err = m(goMap, parent, params)
		}
	case parent.IsList():
		if m, ok := methods.List.Get(method); ok {
			list := parent.ToGoSimpleType(false)
			if err, ok := list.(error); err != nil && ok {
				return fmt.Errorf("failed to cast '%s' to a Go type: %s", parent.String(), err)
			}
			goList, ok := list.([]any)
			if !ok {
				return fmt.Errorf("failed to cast '%s' to []interface{}: %s", parent.String(), err)
			}
			result, err = m(goList, parent, params)
		}
	default:
		err = exec.AsValue(fmt.Errorf(`'%s' is not callable on %s`, method, parent))
	}
	if err != nil {
		return fmt.Errorf("invalid call to method '%s' of %s: %s", method, parent.String(), err.Error())
	}
	if name, ok := n.Parent.(*nodes.Name); ok && r.Environment.Context.Has(name.Name.Val) {
		r.Environment.Context.Set(name.Name.Val, parent.Interface())
	}
	return plainOf(result)
}

func evalFiltered(r *exec.Renderer, n *nodes.FilteredExpression) any {
	v := eval(r, n.Expression)
	// A string passes through the string filters unboxed: v holds s
	// while boxed is set.
	s, isStr := v.(string)
	boxed := true
	for _, f := range n.Filters {
		if isStr {
			if res, ok := stringFilter(f, s); ok {
				s, boxed = res, false
				continue
			}
			if !boxed {
				v = s
			}
			isStr = false
		}
		v = filter(r, f, v)
		if isErr(v) {
			return wrapf(v, "unable to evaluate filter %s", f)
		}
		s, isStr = v.(string)
		boxed = true
	}
	if isStr && !boxed {
		return s
	}
	return v
}

// stringFilter answers replace with literal arguments, lower and trim on
// a string; ok is false otherwise.
func stringFilter(f *nodes.FilterCall, s string) (string, bool) {
	if len(f.Kwargs) > 0 {
		return "", false
	}
	switch f.Name {
	case "replace":
		if len(f.Args) != 2 {
			return "", false
		}
		o, ok1 := f.Args[0].(*nodes.String)
		w, ok2 := f.Args[1].(*nodes.String)
		if ok1 && ok2 {
			return strings.ReplaceAll(s, o.Val, w.Val), true
		}
	case "lower":
		if len(f.Args) == 0 {
			return strings.ToLower(s), true
		}
	case "trim":
		if len(f.Args) == 0 {
			return strings.TrimSpace(s), true
		}
	}
	return "", false
}

// filter is gonja's ExecuteFilter on an evaluated input.
func filter(r *exec.Renderer, f *nodes.FilterCall, in any) any {
	if v, ok := fastFilter(r, f, in); ok {
		return v
	}
	params, failed, arg, kw := evalArgs(r, f.Args, f.Kwargs)
	if params == nil {
		if kw != "" {
			return wrapf(failed, "unable to evaluate parameter %s=%s", kw, arg)
		}
		return wrapf(failed, "unable to evaluate parameter %s", arg)
	}
	fn, ok := r.Environment.Filters.Get(f.Name)
	if !ok {
		return fmt.Errorf("filter '%s' not found", f.Name)
	}
	res := plainOf(fn(r.Evaluator(), toValue(in), params))
	if err, ok := res.(error); ok {
		return fmt.Errorf("invalid call to filter '%s': %s", f.Name, err.Error())
	}
	return res
}

// fastFilter answers the filters default, join, unique, list, sort,
// length and count on the common types (replace, lower and trim on strings
// are stringFilter's); ok is false otherwise. The engine's filter set
// replaces none of these but length and count, whose replacement only
// differs for stores.
func fastFilter(r *exec.Renderer, f *nodes.FilterCall, in any) (any, bool) {
	if len(f.Kwargs) > 0 || isErr(in) {
		return nil, false
	}
	switch f.Name {
	case "default", "d":
		if len(f.Args) < 1 || len(f.Args) > 2 {
			return nil, false
		}
		boolean := false
		if len(f.Args) == 2 {
			b, ok := f.Args[1].(*nodes.Bool)
			if !ok {
				return nil, false
			}
			boolean = b.Val
		}
		// gonja evaluates the default first; a literal cannot fail.
		lazy := literal(f.Args[0])
		var d any
		if !lazy {
			if d = eval(r, f.Args[0]); isErr(d) {
				return wrapf(d, "unable to evaluate parameter %s", f.Args[0]), true
			}
		}
		if in == nil || boolean && !truth(in) {
			if lazy {
				d = eval(r, f.Args[0])
			}
			return d, true
		}
		return in, true
	case "join":
		d := ""
		if len(f.Args) > 1 {
			return nil, false
		}
		if len(f.Args) == 1 {
			lit, ok := f.Args[0].(*nodes.String)
			if !ok {
				return nil, false
			}
			d = lit.Val
		}
		if l, ok := stringList(in); ok {
			return strings.Join(l, d), true
		}
	case "unique":
		if l, ok := stringList(in); ok && len(f.Args) == 0 {
			out := make([]any, 0, len(l))
			seen := make(map[string]bool, len(l))
			for _, s := range l {
				if k := strings.ToLower(s); !seen[k] {
					seen[k] = true
					out = append(out, s)
				}
			}
			return out, true
		}
	case "list":
		if l, ok := stringList(in); ok && len(f.Args) == 0 {
			out := make([]any, len(l))
			for i, s := range l {
				out[i] = s
			}
			return out, true
		}
	case "sort":
		if l, ok := stringList(in); ok && len(f.Args) == 0 {
			keys := make([]string, len(l))
			for i, s := range l {
				keys[i] = strings.ToLower(s)
			}
			idx := make([]int, len(l))
			for i := range idx {
				idx[i] = i
			}
			sort.SliceStable(idx, func(i, j int) bool { return keys[idx[i]] < keys[idx[j]] })
			out := make([]any, len(l))
			for i, k := range idx {
				out[i] = l[k]
			}
			return out, true
		}
	case "length", "count":
		if len(f.Args) > 0 {
			return nil, false
		}
		switch x := in.(type) {
		case string:
			return utf8.RuneCountInString(x), true
		case []any:
			return len(x), true
		case *listValue:
			if x != nil {
				return len(*x), true
			}
		case []string:
			return len(x), true
		}
	}
	return nil, false
}

// stringList returns the items of a list whose items are all strings.
func stringList(in any) ([]string, bool) {
	var items []any
	switch x := in.(type) {
	case []string:
		return x, true
	case []any:
		items = x
	case *listValue:
		if x == nil {
			return nil, false
		}
		items = *x
	default:
		return nil, false
	}
	out := make([]string, len(items))
	for i, e := range items {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// literal reports whether e is a constant or an empty list or dict.
func literal(e nodes.Expression) bool {
	switch x := e.(type) {
	case *nodes.String, *nodes.Integer, *nodes.Bool, *nodes.None:
		return true
	case *nodes.Dict:
		return len(x.Pairs) == 0
	case *nodes.List:
		return len(x.Val) == 0
	}
	return false
}

// inString is gonja's `item in seq` test for a string item.
func inString(r *exec.Renderer, item string, seqNode nodes.Expression) any {
	if l, ok := seqNode.(*nodes.List); ok {
		all := true
		found := false
		for _, e := range l.Val {
			lit, ok := e.(*nodes.String)
			if !ok {
				all = false
				break
			}
			found = found || lit.Val == item
		}
		if all {
			return found
		}
	}
	seq := eval(r, seqNode)
	if isErr(seq) {
		return wrapf(seq, `Unable to evaluate parameter %s`, seqNode)
	}
	if res, ok := contains(seq, item); ok {
		return res
	}
	return toValue(seq).Contains(exec.AsValue(item))
}

func evalTest(r *exec.Renderer, n *nodes.TestExpression) any {
	t := n.Test
	if lit, ok := n.Expression.(*nodes.String); ok && t.Name == "in" && len(t.Args) == 1 && len(t.Kwargs) == 0 {
		return inString(r, lit.Val, t.Args[0])
	}
	v := eval(r, n.Expression)
	if len(t.Kwargs) == 0 {
		switch t.Name {
		case "defined":
			if len(t.Args) == 0 {
				return !(v == nil || isErr(v))
			}
		case "none":
			if len(t.Args) == 0 && !isErr(v) {
				if v == nil {
					return true
				}
				switch v.(type) {
				case string, int, bool, objectMap, []any, *listValue, map[string]any:
					return false
				}
			}
		case "integer":
			if len(t.Args) == 0 {
				switch v.(type) {
				case int:
					return true
				case string, nil, bool, objectMap, []any, *listValue, map[string]any:
					return false
				}
			}
		case "string":
			if len(t.Args) == 0 {
				switch v.(type) {
				case string:
					return true
				case int, nil, bool, objectMap, []any, *listValue, map[string]any:
					return false
				}
			}
		case "in":
			if s, ok := v.(string); ok && len(t.Args) == 1 {
				return inString(r, s, t.Args[0])
			}
			if len(t.Args) == 1 {
				seq := eval(r, t.Args[0])
				if isErr(seq) {
					return wrapf(seq, `Unable to evaluate parameter %s`, t.Args[0])
				}
				if res, ok := contains(seq, v); ok {
					return res
				}
				return toValue(seq).Contains(toValue(v))
			}
		}
	}
	params := &exec.VarArgs{Args: make([]*exec.Value, 0, len(t.Args)), KwArgs: map[string]*exec.Value{}}
	for _, a := range t.Args {
		x := eval(r, a)
		if isErr(x) {
			return wrapf(x, `Unable to evaluate parameter %s`, a)
		}
		params.Args = append(params.Args, toValue(x))
	}
	for k, a := range t.Kwargs {
		x := eval(r, a)
		if isErr(x) {
			return wrapf(x, `Unable to evaluate parameter %s`, a)
		}
		params.KwArgs[k] = toValue(x)
	}
	return plainOf(r.Evaluator().ExecuteTestByName(t.Name, toValue(v), params))
}

// contains answers `item in seq` for a string item in a list or string;
// ok is false for other types.
func contains(seq, item any) (bool, bool) {
	s, ok := item.(string)
	if !ok {
		return false, false
	}
	var list []any
	switch x := seq.(type) {
	case string:
		return strings.Contains(x, s), true
	case []any:
		list = x
	case *listValue:
		if x == nil {
			return false, false
		}
		list = *x
	case exec.ValuesList:
		for _, e := range x {
			if e == nil {
				return false, false
			}
			es, ok := e.Interface().(string)
			if !ok {
				return false, false
			}
			if es == s {
				return true, true
			}
		}
		return false, true
	default:
		return false, false
	}
	for _, e := range list {
		es, ok := e.(string)
		if !ok {
			return false, false
		}
		if es == s {
			return true, true
		}
	}
	return false, true
}

// concatString is the string of one operand of a `~` chain.
func concatString(r *exec.Renderer, n nodes.Node) (string, error) {
	if lit, ok := n.(*nodes.String); ok {
		return lit.Val, nil
	}
	v := eval(r, n)
	if err, ok := v.(error); ok {
		return "", err
	}
	return str(v), nil
}

// concat joins the `~` chain n: the operands of its left spine are
// evaluated left to right and joined once, and a failure is wrapped by
// every level above it as gonja's nested evaluation wraps it.
func concat(r *exec.Renderer, n *nodes.BinaryExpression) any {
	var spineBuf [8]*nodes.BinaryExpression
	spine := spineBuf[:0] // spine[0] is n, the last the innermost level
	var leaf nodes.Node = n
	for {
		b, ok := leaf.(*nodes.BinaryExpression)
		if !ok || b.Operator.Token.Type != tokens.Tilde {
			break
		}
		spine = append(spine, b)
		leaf = b.Left
	}
	var partsBuf [9]string
	parts := partsBuf[:0]
	s, err := concatString(r, leaf)
	level := len(spine)
	for err == nil && level > 0 {
		parts = append(parts, s)
		level--
		s, err = concatString(r, spine[level].Right)
		if err != nil {
			err = wrapf(err, `Unable to evaluate right parameter %s`, spine[level].Right)
		}
	}
	if err != nil {
		for level--; level >= 0; level-- {
			err = wrapf(err, `Unable to evaluate left parameter %s`, spine[level].Left)
		}
		return err
	}
	parts = append(parts, s)
	return strings.Join(parts, "")
}

func evalBinary(r *exec.Renderer, n *nodes.BinaryExpression) any {
	if n.Operator.Token.Type == tokens.Tilde {
		return concat(r, n)
	}
	left := eval(r, n.Left)
	if isErr(left) {
		return wrapf(left, `Unable to evaluate left parameter %s`, n.Left)
	}
	op := n.Operator.Token
	switch op.Type {
	case tokens.And:
		if !truth(left) {
			return left
		}
		right := eval(r, n.Right)
		if isErr(right) {
			return wrapf(right, `Unable to evaluate right parameter %s`, n.Right)
		}
		return right
	case tokens.Or:
		if truth(left) {
			return left
		}
		right := eval(r, n.Right)
		if isErr(right) {
			return wrapf(right, `Unable to evaluate right parameter %s`, n.Right)
		}
		return right
	}
	switch op.Type {
	case tokens.Equals, tokens.Ne:
		if lit, ok := n.Right.(*nodes.String); ok {
			if s, ok := left.(string); ok {
				return (s == lit.Val) == (op.Type == tokens.Equals)
			}
		}
	}
	var right any
	switch op.Val {
	case "and", "or":
		// gonja does not evaluate the right side for these names.
		return plainOf(binary(n, toValue(left), exec.AsValue(nil)))
	}
	right = eval(r, n.Right)
	if isErr(right) {
		return wrapf(right, `Unable to evaluate right parameter %s`, n.Right)
	}
	switch op.Type {
	case tokens.Tilde:
		return str(left) + str(right)
	case tokens.Equals:
		return equal(left, right)
	case tokens.Ne:
		return !equal(left, right)
	}
	if a, ok := left.(int); ok {
		if b, ok := right.(int); ok {
			switch op.Type {
			case tokens.Addition:
				return a + b
			case tokens.Subtraction:
				return a - b
			case tokens.Multiply:
				return a * b
			case tokens.Modulo:
				if b != 0 {
					return a % b
				}
			case tokens.LowerThan:
				return a < b
			case tokens.LowerThanOrEqual:
				return a <= b
			case tokens.GreaterThan:
				return a > b
			case tokens.GreaterThanOrEqual:
				return a >= b
			}
		}
	}
	return plainOf(binary(n, toValue(left), toValue(right)))
}

// binary is gonja's evalBinaryExpression once both sides are evaluated,
// for the operators other than and, or, ~, == and !=, except that what
// Jinja2 refuses is an error here too, where gonja returns a made-up value
// or panics: division and modulo by zero (ZeroDivisionError), and operand
// types the operator does not take (TypeError: `'a' - 1`, `none + 1`,
// `1 < 'a'`).
func binary(node *nodes.BinaryExpression, left, right *exec.Value) *exec.Value {
	if err := checkOperands(node, left, right); err != nil {
		return exec.AsValue(err)
	}
	switch node.Operator.Token.Type {
	case tokens.Addition:
		if left.IsList() {
			if !right.IsList() {
				return exec.AsValue(wrapf(right, `Unable to concatenate list to %s`, node.Right))
			}
			out := make([]any, 0, left.Len()+right.Len())
			lr, rr := resolved(left), resolved(right)
			for i := 0; i < lr.Len(); i++ {
				out = append(out, lr.Index(i).Interface())
			}
			for i := 0; i < rr.Len(); i++ {
				out = append(out, rr.Index(i).Interface())
			}
			return exec.AsValue(out)
		}
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() + right.Float())
		}
		if left.IsString() || right.IsString() {
			return exec.AsValue(left.String() + right.String())
		}
		return exec.AsValue(number(left).Integer() + number(right).Integer())
	case tokens.Subtraction:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() - right.Float())
		}
		return exec.AsValue(number(left).Integer() - number(right).Integer())
	case tokens.Multiply:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() * right.Float())
		}
		if left.IsString() {
			return exec.AsValue(strings.Repeat(left.String(), max(0, number(right).Integer())))
		}
		if right.IsString() {
			return exec.AsValue(strings.Repeat(right.String(), max(0, number(left).Integer())))
		}
		return exec.AsValue(number(left).Integer() * number(right).Integer())
	case tokens.Division:
		return exec.AsValue(number(left).Float() / number(right).Float())
	case tokens.FloorDivision:
		return exec.AsValue(int(number(left).Float() / number(right).Float()))
	case tokens.Modulo:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(pyMod(left.Float(), right.Float()))
		}
		return exec.AsValue(number(left).Integer() % number(right).Integer())
	case tokens.Power:
		return exec.AsValue(math.Pow(number(left).Float(), number(right).Float()))
	case tokens.LowerThanOrEqual:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() <= right.Float())
		}
		if left.IsString() || right.IsString() {
			return exec.AsValue(left.String() <= right.String())
		}
		return exec.AsValue(left.Integer() <= right.Integer())
	case tokens.GreaterThanOrEqual:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() >= right.Float())
		}
		if left.IsString() || right.IsString() {
			return exec.AsValue(left.String() >= right.String())
		}
		return exec.AsValue(left.Integer() >= right.Integer())
	case tokens.GreaterThan:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() > right.Float())
		}
		if left.IsString() || right.IsString() {
			return exec.AsValue(left.String() > right.String())
		}
		return exec.AsValue(left.Integer() > right.Integer())
	case tokens.LowerThan:
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() < right.Float())
		}
		if left.IsString() || right.IsString() {
			return exec.AsValue(left.String() < right.String())
		}
		return exec.AsValue(left.Integer() < right.Integer())
	case tokens.In:
		return exec.AsValue(right.Contains(left))
	}
	return exec.AsValue(fmt.Errorf(`Unknown operator "%s"`, node.Operator.Token))
}

// pyType is the name Jinja2 (Python) gives v's type in its errors.
func pyType(v *exec.Value) string {
	switch {
	case v.IsNil():
		return "NoneType"
	case v.IsBool():
		return "bool"
	case v.IsInteger():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	}
	return fmt.Sprintf("%T", v.Interface())
}

// numeric reports whether v is a number to Python: an int, a float or a
// bool.
func numeric(v *exec.Value) bool {
	return !v.IsNil() && (v.IsInteger() || v.IsFloat() || v.IsBool())
}

// number is v with a bool as the int Python takes it for.
func number(v *exec.Value) *exec.Value {
	if v.IsBool() {
		if v.Bool() {
			return exec.AsValue(1)
		}
		return exec.AsValue(0)
	}
	return v
}

// checkOperands returns the error Jinja2 raises for node on these operands,
// or nil: a ZeroDivisionError or a TypeError, in Python's words.
func checkOperands(node *nodes.BinaryExpression, left, right *exec.Value) error {
	op := node.Operator.Token
	both := numeric(left) && numeric(right)
	strs := left.IsString() && right.IsString()
	ok := true
	switch op.Type {
	case tokens.Addition:
		ok = both || strs || left.IsList() && right.IsList()
	case tokens.Subtraction, tokens.Power:
		ok = both
	case tokens.Multiply:
		ok = both || left.IsString() && numeric(right) && !right.IsFloat() || right.IsString() && numeric(left) && !left.IsFloat()
	case tokens.Division, tokens.FloorDivision, tokens.Modulo:
		if left.IsString() && op.Type == tokens.Modulo {
			return errors.New("string formatting with % is not supported; use the format filter")
		}
		ok = both
		if ok && number(right).Float() == 0 {
			return errors.New("division by zero")
		}
	case tokens.LowerThan, tokens.LowerThanOrEqual, tokens.GreaterThan, tokens.GreaterThanOrEqual:
		if !both && !strs {
			return fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op.Val, pyType(left), pyType(right))
		}
	}
	if !ok {
		return fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op.Val, pyType(left), pyType(right))
	}
	return nil
}

// pyMod is Python's float modulo: the result has the sign of b.
func pyMod(a, b float64) float64 {
	m := math.Mod(a, b)
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

func resolved(v *exec.Value) reflect.Value {
	if v.Val.IsValid() && v.Val.Kind() == reflect.Pointer {
		return v.Val.Elem()
	}
	return v.Val
}

// walk renders the nodes of w with r.
func walk(r *exec.Renderer, w *nodes.Wrapper) error {
	for _, n := range w.Nodes {
		switch x := n.(type) {
		case *nodes.Output:
			if !r.Config.AutoEscape {
				if err := writeOutput(r, x); err != nil {
					return err
				}
				continue
			}
		case *nodes.ControlStructureBlock:
			// As gonja's Renderer.Visit.
			if cs, ok := x.ControlStructure.(exec.ControlStructure); ok {
				if err := cs.Execute(r, x); err != nil {
					return fmt.Errorf("Unable to execute controlStructure at line %d: %s: %w", x.ControlStructure.Position().Line, x.ControlStructure, err)
				}
			}
			continue
		}
		if err := nodes.Walk(r, n); err != nil {
			return err
		}
	}
	return nil
}

// ownOutputs makes the engine evaluate the `{{ ... }}` at the top level of
// tpl too (gonja renders them itself otherwise, with its own arithmetic,
// which makes up values where Jinja2 raises): each becomes an
// engineOutput. Bodies of the engine's control structures are walked by
// walk, which evaluates their outputs already.
func (s *Set) ownOutputs(tpl *exec.Template) {
	if !s.fast {
		return
	}
	list := tpl.Root().Nodes
	for i, n := range list {
		if o, ok := n.(*nodes.Output); ok {
			list[i] = &nodes.ControlStructureBlock{Location: o.Start, Name: "output", ControlStructure: &engineOutput{o}}
		}
	}
}

// engineOutput is a top-level output the engine evaluates.
type engineOutput struct{ orig *nodes.Output }

func (n *engineOutput) Position() *tokens.Token { return n.orig.Start }

// String has the form of gonja's control structures, which the error
// messages leave out (runtimeError).
func (n *engineOutput) String() string {
	return fmt.Sprintf("Output(Line=%d Col=%d)", n.orig.Start.Line, n.orig.Start.Col)
}

func (n *engineOutput) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	if r.Config.AutoEscape {
		_, err := r.Visit(n.orig)
		return err
	}
	return writeOutput(r, n.orig)
}

// writeOutput is gonja's rendering of `{{ ... }}`.
func writeOutput(r *exec.Renderer, n *nodes.Output) error {
	var v any
	if n.Condition != nil {
		cond := eval(r, n.Condition)
		if isErr(cond) {
			return wrapf(cond, `Unable to render condition at line %d: %s`, n.Condition.Position().Line, n.Condition)
		}
		switch {
		case truth(cond):
			v = eval(r, n.Expression)
		case n.Alternative != nil:
			v = eval(r, n.Alternative)
		default:
			return nil
		}
	} else {
		v = eval(r, n.Expression)
	}
	if isErr(v) {
		return wrapf(v, `Unable to render expression at line %d: %s`, n.Expression.Position().Line, n.Expression)
	}
	_, err := io.WriteString(r.Output, str(v))
	return err
}
