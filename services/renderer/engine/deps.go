package engine

import (
	"sort"
	"sync"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// valuesView is what templates see as `values`: the values map, recording
// which names a render reads so that a change of one value re-renders only
// the targets that read it. Listing all values (items, keys, values) marks
// the render as depending on every value. It is a struct, not a map, so
// that no access can bypass the recording.
type valuesView struct {
	m  objectMap
	mu *sync.Mutex
	rd *valuesRead
}

type valuesRead struct {
	names map[string]bool
	all   bool
}

func newValuesView(m map[string]any) valuesView {
	return valuesView{m: objectMap(m), mu: &sync.Mutex{}, rd: &valuesRead{names: map[string]bool{}}}
}

func (v valuesView) read(name string) {
	v.mu.Lock()
	v.rd.names[name] = true
	v.mu.Unlock()
}

func (v valuesView) readAll() {
	v.mu.Lock()
	v.rd.all = true
	v.mu.Unlock()
}

// String prints the values as a dict does.
func (v valuesView) String() string {
	v.readAll()
	return exec.AsValue(map[string]any(v.m)).String()
}

// GetAttribute implements exec.AttributeGetter.
func (v valuesView) GetAttribute(name string) (*exec.Value, bool) {
	switch name {
	case "items", "keys", "values":
		v.readAll()
		return v.m.GetAttribute(name)
	case "get":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if len(args.Args) >= 1 {
				v.read(args.Args[0].String())
			}
			get, _ := v.m.GetAttribute("get")
			return get.Interface().(func(*exec.VarArgs) (any, error))(args)
		}), true
	}
	v.read(name)
	return v.m.GetAttribute(name)
}

// GetItem implements exec.ItemGetter: values['name'].
func (v valuesView) GetItem(key any) (*exec.Value, bool) {
	if k, ok := key.(string); ok {
		v.read(k)
	}
	return v.m.GetItem(key)
}

// result returns the names read, sorted, and whether every value was read.
func (v valuesView) result() ([]string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	names := make([]string, 0, len(v.rd.names))
	for n := range v.rd.names {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, v.rd.all
}
