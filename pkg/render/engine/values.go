package engine

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"

	"github.com/nikolalohinski/gonja/v2/exec"

	"github.com/weftio/weft/pkg/render/index"
)

// resourcesMap is what templates see as `resources`: a dict of type name to
// store, with the dict methods get/items/keys/values answered directly
// (gonja's own dict methods deep-copy the receiver on every call).
type resourcesMap map[string]any

// newResources wraps the caller's resources once per render; every output
// and fragment entry of the render shares the stores' snapshots, and the
// outputs keep the trees they read in kept (nil: none kept).
func newResources(in map[string]any, kept *keptTrees) resourcesMap {
	out := make(resourcesMap, len(in))
	for typ, v := range in {
		if st, ok := v.(*index.Store); ok && st != nil {
			out[typ] = &storeValue{d: &storeData{st: st, kept: kept}}
			continue
		}
		out[typ] = wrapObject(v)
	}
	return out
}

// recording returns a copy of r whose stores record reads into rec; keep
// says whether the objects they read are kept for the next render (an
// output's reads, not a fragment entry's).
func (r resourcesMap) recording(rec *reads, keep bool) resourcesMap {
	out := make(resourcesMap, len(r))
	for typ, v := range r {
		if sv, ok := v.(*storeValue); ok {
			v = &storeValue{d: sv.d, rec: rec, keep: keep}
		}
		out[typ] = v
	}
	return out
}

// keptTrees are the objects the outputs of a Set read in its last render
// and in this one, decoded, by the index's Object of their revision. The
// index keeps objects as JSON and a tree only until the next garbage
// collection; a template whose outputs read every object on every render
// (a loop over a type, a lookup per item) would decode them all each
// time. What the outputs read is kept until the end of the next render,
// so an object read render after render is decoded once per revision.
// Fragment entries' reads are not kept: an entry renders again only when
// what it read changed, and a library of fragments over 100,000 objects
// would otherwise hold every tree its first render decoded.
type keptTrees struct {
	mu        sync.Mutex
	prev, cur map[*index.Object]map[string]any
}

// start begins a render: the last render's trees become the ones to take
// from, and those this render does not read are dropped at its end.
func (k *keptTrees) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.prev, k.cur = k.cur, map[*index.Object]map[string]any{}
}

// end drops the trees of the last render this one did not read.
func (k *keptTrees) end() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.prev = nil
}

// of returns it's object, decoded, and keeps it.
func (k *keptTrees) of(it index.Item) map[string]any {
	o := it.Stored()
	k.mu.Lock()
	t, ok := k.cur[o]
	if !ok {
		if t, ok = k.prev[o]; ok {
			k.cur[o] = t
		}
	}
	k.mu.Unlock()
	if ok {
		return t
	}
	t = it.Object()
	k.mu.Lock()
	k.cur[o] = t
	k.mu.Unlock()
	return t
}

func (r resourcesMap) sortedKeys() []string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// GetAttribute implements exec.AttributeGetter: dict methods first, then
// `resources.<type>`.
func (r resourcesMap) GetAttribute(name string) (*exec.Value, bool) {
	switch name {
	case "get":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("get() takes 1 or 2 positional arguments"))
			}
			if v, ok := r[args.Args[0].String()]; ok {
				return v, nil
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, nil
		}), true
	case "items":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			keys := r.sortedKeys()
			out := make([]any, len(keys))
			for i, k := range keys {
				out[i] = []any{k, r[k]}
			}
			return out, nil
		}), true
	case "keys":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			return r.sortedKeys(), nil
		}), true
	case "values":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			keys := r.sortedKeys()
			out := make([]any, len(keys))
			for i, k := range keys {
				out[i] = r[k]
			}
			return out, nil
		}), true
	}
	if v, ok := r[name]; ok {
		return exec.ToValue(v), true
	}
	return exec.AsValue(nil), false
}

// storeData is one store in one render: the items/keys/values snapshot is
// built once, on first use, and shared by every output and fragment entry
// of the render, so they all iterate the same snapshot.
type storeData struct {
	st    *index.Store
	kept  *keptTrees
	once  sync.Once
	items []index.Item
}

func (d *storeData) snapshot() []index.Item {
	d.once.Do(func() { d.items = d.st.Items() })
	return d.items
}

// storeValue presents an *index.Store to templates as a read-only dict of
// id to object with the extra method get_indexed. In a fragment, rec
// records each read: an object by id (get, store['id']), a get_indexed
// lookup by its key tuple, or the whole type (items, keys, values, len,
// length, get_indexed without keys, printing the store).
type storeValue struct {
	d    *storeData
	rec  *reads
	keep bool // an output's: the trees it reads are kept (keptTrees)
}

// tree returns it's object as templates see it.
func (s *storeValue) tree(it index.Item) objectMap {
	if s.keep && s.d.kept != nil {
		return objectMap(s.d.kept.of(it))
	}
	return objectMap(it.Object())
}

func (s *storeValue) readAll() []index.Item {
	if s.rec != nil {
		s.rec.typ(s.d.st.Type())
	}
	return s.d.snapshot()
}

func (s *storeValue) get(id string) (objectMap, bool) {
	if s.rec != nil {
		s.rec.object(s.d.st.Type(), id)
	}
	it, ok := s.d.st.Item(id)
	if !ok {
		return nil, false
	}
	return s.tree(it), true
}

// String renders a store in messages and {{ }} as a short description.
func (s *storeValue) String() string {
	return fmt.Sprintf("<store %s: %d objects>", s.d.st.Type(), len(s.readAll()))
}

// GetAttribute implements exec.AttributeGetter with the store's methods.
func (s *storeValue) GetAttribute(name string) (*exec.Value, bool) {
	switch name {
	case "items":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			items := s.readAll()
			out := make([]any, len(items))
			for i, it := range items {
				out[i] = []any{it.ID, s.tree(it)}
			}
			return out, nil
		}), true
	case "keys":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			items := s.readAll()
			out := make([]any, len(items))
			for i, it := range items {
				out[i] = it.ID
			}
			return out, nil
		}), true
	case "values":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			items := s.readAll()
			out := make([]any, len(items))
			for i, it := range items {
				out[i] = s.tree(it)
			}
			return out, nil
		}), true
	case "get":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("get() takes 1 or 2 positional arguments"))
			}
			if obj, ok := s.get(args.Args[0].String()); ok {
				return obj, nil
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, nil
		}), true
	case "get_indexed":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("get_indexed() takes no keyword arguments"))
			}
			keys := make([]string, len(args.Args))
			for i, a := range args.Args {
				keys[i] = a.String() // None indexes as "", like a missing field
			}
			if s.rec != nil {
				if len(keys) == 0 {
					s.rec.typ(s.d.st.Type())
				} else {
					s.rec.lookup(s.d.st.Type(), keys)
				}
			}
			items := s.d.st.GetIndexedItems(keys...)
			out := make([]any, len(items))
			for i, it := range items {
				out[i] = s.tree(it)
			}
			return out, nil
		}), true
	case "len":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			return len(s.readAll()), nil
		}), true
	}
	return exec.AsValue(nil), false
}

// GetItem implements exec.ItemGetter: store['<id>'].
func (s *storeValue) GetItem(key any) (*exec.Value, bool) {
	id, ok := key.(string)
	if !ok {
		return exec.AsValue(nil), false
	}
	if obj, ok := s.get(id); ok {
		return exec.AsValue(obj), true
	}
	return exec.AsValue(nil), false
}

// listValue is a mutable list with Python reference semantics: every name
// bound to it shares it, so `{% set _ = l.append(x) %}` inside a loop is
// visible after the loop. `{% set %}` turns every list it binds into one
// (copying, so shared resource data is never modified).
type listValue []any

func newList(v any) (*listValue, bool) {
	switch x := v.(type) {
	case *listValue:
		return x, true
	case exec.ValuesList:
		l := make(listValue, len(x))
		for i, e := range x {
			l[i] = e.Interface()
		}
		return &l, true
	case []any:
		l := listValue(slices.Clone(x))
		return &l, true
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, false
	}
	if rv.Type().Elem().Kind() == reflect.Uint8 {
		return nil, false // bytes stay bytes
	}
	l := make(listValue, rv.Len())
	for i := range l {
		l[i] = rv.Index(i).Interface()
	}
	return &l, true
}

func plain(v *exec.Value) any {
	if v == nil {
		return nil
	}
	return v.Interface()
}

// GetAttribute implements exec.AttributeGetter with Python's list methods.
func (l *listValue) GetAttribute(name string) (*exec.Value, bool) {
	var fn func(args *exec.VarArgs) (any, error)
	switch name {
	case "append":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("append() takes exactly one argument"))
			}
			*l = append(*l, plain(args.Args[0]))
			return nil, nil
		}
	case "extend":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("extend() takes exactly one argument"))
			}
			if !args.Args[0].IsIterable() {
				return nil, exec.ErrInvalidCall(fmt.Errorf("extend() argument is not iterable: %s", args.Args[0].String()))
			}
			args.Args[0].Iterate(func(_, _ int, item, _ *exec.Value) bool {
				*l = append(*l, plain(item))
				return true
			}, func() {})
			return nil, nil
		}
	case "insert":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) != 2 || !args.Args[0].IsInteger() {
				return nil, exec.ErrInvalidCall(errors.New("insert() takes an integer index and a value"))
			}
			i := args.Args[0].Integer()
			n := len(*l)
			if i < 0 {
				i = max(n+i, 0)
			}
			i = min(i, n)
			*l = slices.Insert(*l, i, plain(args.Args[1]))
			return nil, nil
		}
	case "pop":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) > 1 || len(args.Args) == 1 && !args.Args[0].IsInteger() {
				return nil, exec.ErrInvalidCall(errors.New("pop() takes an optional integer index"))
			}
			n := len(*l)
			i := n - 1
			if len(args.Args) == 1 {
				i = args.Args[0].Integer()
				if i < 0 {
					i += n
				}
			}
			if i < 0 || i >= n {
				return nil, errors.New("pop index out of range")
			}
			v := (*l)[i]
			*l = slices.Delete(*l, i, i+1)
			return v, nil
		}
	case "remove":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 {
				return nil, exec.ErrInvalidCall(errors.New("remove() takes exactly one argument"))
			}
			for i, e := range *l {
				if exec.ToValue(e).EqualValueTo(args.Args[0]) {
					*l = slices.Delete(*l, i, i+1)
					return nil, nil
				}
			}
			return nil, fmt.Errorf("list.remove(x): %s not in list", args.Args[0].String())
		}
	case "index":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 {
				return nil, exec.ErrInvalidCall(errors.New("index() takes exactly one argument"))
			}
			for i, e := range *l {
				if exec.ToValue(e).EqualValueTo(args.Args[0]) {
					return i, nil
				}
			}
			return nil, fmt.Errorf("%s is not in list", args.Args[0].String())
		}
	case "count":
		fn = func(args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 {
				return nil, exec.ErrInvalidCall(errors.New("count() takes exactly one argument"))
			}
			n := 0
			for _, e := range *l {
				if exec.ToValue(e).EqualValueTo(args.Args[0]) {
					n++
				}
			}
			return n, nil
		}
	case "clear":
		fn = func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			*l = (*l)[:0:0]
			return nil, nil
		}
	case "copy":
		fn = func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			c := listValue(slices.Clone(*l))
			return &c, nil
		}
	case "reverse":
		fn = func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			slices.Reverse(*l)
			return nil, nil
		}
	default:
		return exec.AsValue(nil), false
	}
	return exec.AsValue(fn), true
}

// listMethods are the methods of lists that were not bound with set (loop
// variables, resource data). They never write into the receiver's backing
// array, which may be shared resource data read by concurrent renders.
var listMethods = exec.NewMethodSet(map[string]exec.Method[[]any]{
	"append": func(self []any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) != 1 || len(args.KwArgs) > 0 {
			return nil, exec.ErrInvalidCall(errors.New("append() takes exactly one argument"))
		}
		// self is a fresh copy made by the evaluator; the caller rebinds
		// the name to selfValue.
		*selfValue = *exec.AsValue(append(self, plain(args.Args[0])))
		return nil, nil
	},
	"reverse": func(self []any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		if err := args.Take(); err != nil {
			return nil, exec.ErrInvalidCall(err)
		}
		slices.Reverse(self)
		*selfValue = *exec.AsValue(self)
		return nil, nil
	},
	"copy": func(self []any, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if err := args.Take(); err != nil {
			return nil, exec.ErrInvalidCall(err)
		}
		return self, nil
	},
	"index": func(self []any, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) != 1 {
			return nil, exec.ErrInvalidCall(errors.New("index() takes exactly one argument"))
		}
		for i, e := range self {
			if exec.ToValue(e).EqualValueTo(args.Args[0]) {
				return i, nil
			}
		}
		return nil, fmt.Errorf("%s is not in list", args.Args[0].String())
	},
	"count": func(self []any, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) != 1 {
			return nil, exec.ErrInvalidCall(errors.New("count() takes exactly one argument"))
		}
		n := 0
		for _, e := range self {
			if exec.ToValue(e).EqualValueTo(args.Args[0]) {
				n++
			}
		}
		return n, nil
	},
})

// objectMap is a stored object (or a map inside one) as templates see it:
// the same map, answering the dict methods get/items/keys/values itself.
// gonja would otherwise route every `obj.get(...)` through its generic
// method call, which formats the whole receiver as a string and deep-copies
// it first. Attribute access follows Python: a method name wins over a key
// of the same name (use obj['items'] for the key).
type objectMap map[string]any

// wrapObject presents v to templates: maps become objectMap, and a list
// holding maps is copied with its maps wrapped (gonja iterates lists by
// reflection, so the elements must be wrapped before they are handed out).
func wrapObject(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return objectMap(x)
	case []any:
		for i, e := range x {
			if _, ok := e.(map[string]any); ok {
				out := make([]any, len(x))
				copy(out, x[:i])
				for j := i; j < len(x); j++ {
					out[j] = wrapObject(x[j])
				}
				return out
			}
		}
	}
	return v
}

func (o objectMap) sortedKeys() []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// GetAttribute implements exec.AttributeGetter.
func (o objectMap) GetAttribute(name string) (*exec.Value, bool) {
	switch name {
	case "get":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("get() takes 1 or 2 positional arguments"))
			}
			if v, ok := o[args.Args[0].String()]; ok {
				return wrapObject(v), nil
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, nil
		}), true
	case "items":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			keys := o.sortedKeys()
			out := make([]any, len(keys))
			for i, k := range keys {
				out[i] = []any{k, wrapObject(o[k])}
			}
			return out, nil
		}), true
	case "keys":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			return o.sortedKeys(), nil
		}), true
	case "values":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			keys := o.sortedKeys()
			out := make([]any, len(keys))
			for i, k := range keys {
				out[i] = wrapObject(o[k])
			}
			return out, nil
		}), true
	}
	if v, ok := o[name]; ok {
		return exec.ToValue(wrapObject(v)), true
	}
	return exec.AsValue(nil), false
}

// GetItem implements exec.ItemGetter: obj['key'], wrapped like attributes.
func (o objectMap) GetItem(key any) (*exec.Value, bool) {
	k, ok := key.(string)
	if !ok {
		return exec.AsValue(nil), false
	}
	if v, ok := o[k]; ok {
		return exec.ToValue(wrapObject(v)), true
	}
	return exec.AsValue(nil), false
}
