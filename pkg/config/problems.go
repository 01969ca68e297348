package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config/fieldpath"
)

// Error is one problem of a configuration: where it is in the file, the
// field it concerns and what is wrong. It wraps ErrInvalid.
type Error struct {
	// File is the file as given to Load ("weft.yaml" for Parse).
	File string
	// Line and Column (1-based) locate the field in the file: its key, or
	// where its value sits (a list item, a character of an index_by
	// expression); a required field that is missing is located at the
	// nearest field around it that is there. 0 when unknown.
	Line, Column int
	// Path is the field path: sources[0].name, targets.edge.deploy.driver,
	// targets.edge.maps['hosts.map'] (keys that are not identifiers are
	// quoted as in fieldpath). Empty for the whole file.
	Path string
	// Message says what is wrong.
	Message string
	// Err is the error Message comes from, when it has one to match with
	// errors.Is (a confdir's, a file system's).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true, and errors.Is of Err.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// Problems is every problem of one configuration, in file order. Load and
// Parse return it (errors.As finds it); each line of its text is one Error.
type Problems []*Error

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns every problem.
func (ps Problems) Unwrap() []error {
	out := make([]error, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// path is a field path under construction: string keys and int indices.
type path []any

// k returns p followed by keys.
func (p path) k(keys ...string) path {
	out := slices.Clip(p)
	for _, k := range keys {
		out = append(out, k)
	}
	return out
}

// i returns p followed by the list index n.
func (p path) i(n int) path { return append(slices.Clip(p), n) }

func (p path) String() string {
	var b strings.Builder
	for _, s := range p {
		switch s := s.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", s)
		case string:
			k := fieldpath.New(s).String()
			if b.Len() > 0 && !strings.HasPrefix(k, "[") {
				b.WriteByte('.')
			}
			b.WriteString(k)
		}
	}
	return b.String()
}

// problems collects the problems of one file, located in its YAML.
type problems struct {
	file string
	root *yaml3.Node // the document's top node; nil when it did not parse
	// targetOf locates the targets a confd target became at the confd
	// target (they are not in the file).
	targetOf map[string]string
	list     Problems
}

// add records a problem of the field at p.
func (ps *problems) add(p path, format string, args ...any) {
	line, col := ps.locate(p)
	ps.list = append(ps.list, &Error{File: ps.file, Line: line, Column: col, Path: p.String(), Message: fmt.Sprintf(format, args...)})
}

// addErr records err as problems of the field at p, one for each error
// err joins.
func (ps *problems) addErr(p path, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			ps.addErr(p, e)
		}
		return
	}
	line, col := ps.locate(p)
	ps.list = append(ps.list, &Error{File: ps.file, Line: line, Column: col, Path: p.String(), Message: err.Error(), Err: err})
}

// addAt records a problem at a known position.
func (ps *problems) addAt(line, col int, p path, format string, args ...any) {
	ps.list = append(ps.list, &Error{File: ps.file, Line: line, Column: col, Path: p.String(), Message: fmt.Sprintf(format, args...)})
}

// err returns the problems in file order, or nil.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	slices.SortStableFunc(ps.list, func(a, b *Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line) // unknown positions last
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	return ps.list
}

// node returns the YAML node of p and the position of the nearest part of
// p found: the key of a field, the item of a list.
func (ps *problems) locate(p path) (line, col int) {
	n := ps.root
	if n == nil {
		return 0, 0
	}
	line, col = n.Line, n.Column
	for depth, seg := range p {
		n = resolve(n)
		switch seg := seg.(type) {
		case string:
			k, v := lookup(n, seg)
			if k == nil && depth == 1 && len(p) > 0 && p[0] == "targets" && ps.targetOf[seg] != "" {
				k, v = lookup(n, ps.targetOf[seg])
			}
			if k == nil {
				return line, col
			}
			line, col, n = k.Line, k.Column, v
		case int:
			if n.Kind != yaml3.SequenceNode || seg >= len(n.Content) {
				return line, col
			}
			n = n.Content[seg]
			line, col = n.Line, n.Column
		}
	}
	return line, col
}

// valueNode returns the value node at p, or nil.
func (ps *problems) valueNode(p path) *yaml3.Node {
	n := ps.root
	for _, seg := range p {
		if n == nil {
			return nil
		}
		n = resolve(n)
		switch seg := seg.(type) {
		case string:
			_, n = lookup(n, seg)
		case int:
			if n.Kind != yaml3.SequenceNode || seg >= len(n.Content) {
				return nil
			}
			n = n.Content[seg]
		}
	}
	return n
}

// addExpr records a problem of a field path expression (index_by, ignore
// fields) at p, at the column of the expression fieldpath points to when
// the expression is written on one line.
func (ps *problems) addExpr(p path, err error) {
	var se *fieldpath.SyntaxError
	n := ps.valueNode(p)
	if !errors.As(err, &se) || n == nil || n.Kind != yaml3.ScalarNode || strings.Contains(n.Value, "\\") {
		ps.add(p, "%v", err)
		return
	}
	col := n.Column + se.Column - 1
	switch n.Style {
	case yaml3.SingleQuotedStyle:
		if strings.Contains(n.Value, "'") {
			ps.add(p, "%v", err) // '' escapes shift the columns
			return
		}
		col++
	case yaml3.DoubleQuotedStyle:
		col++
	case yaml3.LiteralStyle, yaml3.FoldedStyle:
		ps.add(p, "%v", err)
		return
	}
	ps.addAt(n.Line, col, p, "%v", err)
}

// resolve follows aliases.
func resolve(n *yaml3.Node) *yaml3.Node {
	for n != nil && n.Kind == yaml3.AliasNode {
		n = n.Alias
	}
	return n
}

// lookup returns the key and value nodes of key in the mapping n, merge
// keys (<<) included.
func lookup(n *yaml3.Node, key string) (k, v *yaml3.Node) {
	if n == nil || n.Kind != yaml3.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i].Tag != "!!merge" {
			return n.Content[i], n.Content[i+1]
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Tag != "!!merge" {
			continue
		}
		for _, m := range merged(n.Content[i+1]) {
			if k, v := lookup(m, key); k != nil {
				return k, v
			}
		}
	}
	return nil, nil
}

// merged returns the mappings a merge key's value names.
func merged(v *yaml3.Node) []*yaml3.Node {
	v = resolve(v)
	if v == nil {
		return nil
	}
	if v.Kind == yaml3.SequenceNode {
		out := make([]*yaml3.Node, 0, len(v.Content))
		for _, m := range v.Content {
			out = append(out, resolve(m))
		}
		return out
	}
	return []*yaml3.Node{v}
}

var yamlLine = regexp.MustCompile(`^(?:error converting YAML to JSON: )?yaml: line (\d+): `)

// parseYAML parses data for positions. A syntax error is returned as the
// Error to report; an empty document (nothing but comments and blank
// lines, or null) as a nil node.
func parseYAML(file string, data []byte) (*yaml3.Node, *Error) {
	var doc yaml3.Node
	if err := yaml3.Unmarshal(data, &doc); err != nil {
		e := &Error{File: file, Message: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Message = "not valid YAML: " + strings.TrimPrefix(err.Error(), m[0])
		}
		// Each parser names a line near the fault, the one where what it
		// was reading began or where it noticed; the later is closer.
		var v any
		if err2 := yaml.Unmarshal(data, &v); err2 != nil {
			if m := yamlLine.FindStringSubmatch(err2.Error()); m != nil {
				if l, _ := strconv.Atoi(m[1]); l > e.Line {
					e.Line = l
				}
			}
		}
		return nil, e
	}
	if doc.Kind != yaml3.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	root := resolve(doc.Content[0])
	if root.Kind == yaml3.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	return root, nil
}
