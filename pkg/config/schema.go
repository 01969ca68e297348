package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	yaml3 "go.yaml.in/yaml/v3"
)

// checkShape reports every field of n that the Go type t has no place for
// (with the closest known field name), every value of the wrong kind and
// every key given twice, each at its line. It accepts what the decoder
// (sigs.k8s.io/yaml, YAML 1.1) accepts: any scalar for a string, yes/no
// and on/off for a bool, a duration only as a string.
func checkShape(ps *problems, n *yaml3.Node, t reflect.Type, p path) {
	n = resolve(n)
	if n == nil || (n.Kind == yaml3.ScalarNode && n.Tag == "!!null") {
		return // null is the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		checkDuration(ps, n, p)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if !expect(ps, n, yaml3.MappingNode, p, "a mapping of fields") {
			return
		}
		fields := jsonFields(t)
		eachPair(ps, n, p, func(k, v *yaml3.Node) {
			f, ok := fields[k.Value]
			if !ok {
				ps.addAt(k.Line, k.Column, p.k(k.Value), "%s", unknownField(k.Value, fields))
				return
			}
			checkShape(ps, v, f.Type, p.k(k.Value))
		})
	case reflect.Map:
		if !expect(ps, n, yaml3.MappingNode, p, "a mapping") {
			return
		}
		eachPair(ps, n, p, func(k, v *yaml3.Node) { checkShape(ps, v, t.Elem(), p.k(k.Value)) })
	case reflect.Slice:
		if !expect(ps, n, yaml3.SequenceNode, p, "a list") {
			return
		}
		for i, item := range n.Content {
			checkShape(ps, item, t.Elem(), p.i(i))
		}
	case reflect.String:
		expect(ps, n, yaml3.ScalarNode, p, "a string")
	case reflect.Bool:
		if expect(ps, n, yaml3.ScalarNode, p, "true or false") && n.Tag != "!!bool" && !(n.Style == 0 && yaml11Bool[strings.ToLower(n.Value)]) {
			ps.addAt(n.Line, n.Column, p, "must be true or false, got %s", quoted(n))
		}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		if expect(ps, n, yaml3.ScalarNode, p, "a whole number") && n.Tag != "!!int" {
			ps.addAt(n.Line, n.Column, p, "must be a whole number, got %s", quoted(n))
		}
	}
}

var durationType = reflect.TypeFor[Duration]()

// yaml11Bool are the plain scalars YAML 1.1 (the decoder) reads as bools
// and YAML 1.2 (the position parser) reads as strings.
var yaml11Bool = map[string]bool{"yes": true, "no": true, "on": true, "off": true, "y": true, "n": true}

func checkDuration(ps *problems, n *yaml3.Node, p path) {
	if !expect(ps, n, yaml3.ScalarNode, p, "a duration") {
		return
	}
	if n.Tag == "!!str" {
		if _, err := time.ParseDuration(n.Value); err == nil {
			return
		}
	}
	hint := ""
	if n.Tag == "!!int" || n.Tag == "!!float" {
		hint = fmt.Sprintf(" (a number needs a unit: %ss?)", n.Value)
	}
	ps.addAt(n.Line, n.Column, p, `must be a duration like "250ms", "30s" or "1m30s", got %s%s`, quoted(n), hint)
}

// expect reports n when it is not of kind, and says whether it is.
func expect(ps *problems, n *yaml3.Node, kind yaml3.Kind, p path, what string) bool {
	if n.Kind == kind {
		return true
	}
	ps.addAt(n.Line, n.Column, p, "must be %s, got %s", what, describe(n))
	return false
}

// eachPair calls f for each key and value of the mapping n, merged
// mappings included, and reports keys given twice.
func eachPair(ps *problems, n *yaml3.Node, p path, f func(k, v *yaml3.Node)) {
	seen := map[string]int{}
	var walk func(m *yaml3.Node, merging bool)
	walk = func(m *yaml3.Node, merging bool) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if k.Tag == "!!merge" {
				continue
			}
			if line, dup := seen[k.Value]; dup {
				if !merging {
					ps.addAt(k.Line, k.Column, p.k(k.Value), "given twice (first on line %d)", line)
				}
				continue // a merged mapping's key gives way to the mapping's own
			}
			seen[k.Value] = k.Line
			f(k, v)
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Tag != "!!merge" {
				continue
			}
			for _, mm := range merged(m.Content[i+1]) {
				if mm != nil && mm.Kind == yaml3.MappingNode {
					walk(mm, true)
				}
			}
		}
	}
	walk(n, false)
}

// jsonFields maps the JSON names of t's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// unknownField says that name is not a field, suggesting the known field
// closest to it by edit distance, or listing them all when none is close.
func unknownField(name string, fields map[string]reflect.StructField) string {
	known := make([]string, 0, len(fields))
	for k := range fields {
		known = append(known, k)
	}
	slices.Sort(known)
	best, bestD := "", -1
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), k); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" && bestD <= max(2, len(name)/3) {
		return fmt.Sprintf("unknown field %q; did you mean %q?", name, best)
	}
	return fmt.Sprintf("unknown field %q (known: %s)", name, strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// describe names what n is, for "must be X, got Y".
func describe(n *yaml3.Node) string {
	switch n.Kind {
	case yaml3.MappingNode:
		return "a mapping"
	case yaml3.SequenceNode:
		return "a list"
	}
	return quoted(n)
}

// quoted shows a scalar as written: strings quoted, numbers and bools not.
func quoted(n *yaml3.Node) string {
	if n.Tag == "!!str" {
		return fmt.Sprintf("%q", n.Value)
	}
	return n.Value
}
