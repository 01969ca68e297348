// Package fieldpath is weft's small field-path language, used by index_by
// and by the "ignore fields" lists of watched resources.
//
// A path names one value inside a decoded JSON object (map[string]any):
//
//	metadata.namespace
//	metadata.labels['kubernetes.io/service-name']
//	metadata.labels["app"]
//	spec.rules
//
// It is a dotted list of identifiers (letters, digits, '_' and '-'), where
// any step may instead be a bracketed, single- or double-quoted key for keys
// that are not identifiers. Inside quotes a backslash escapes the next
// character. A path starts with an identifier or a bracketed key and never
// ends with a dot. Paths only descend through maps; lists are not indexed.
//
// The package owns parsing and evaluation only. A Path is immutable after
// Parse and safe for concurrent use; Lookup never modifies the object, Delete
// modifies only the map that holds the leaf.
package fieldpath

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSyntax is matched (errors.Is) by every error Parse returns.
var ErrSyntax = errors.New("field path syntax error")

// SyntaxError describes where a field path expression is malformed.
type SyntaxError struct {
	Expr   string // the expression as given
	Column int    // 1-based byte column of the problem
	Msg    string // what is wrong there
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("field path %q: column %d: %s", e.Expr, e.Column, e.Msg)
}

// Unwrap makes errors.Is(err, ErrSyntax) true.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// Path is a parsed field path: the keys to descend through, in order.
// The zero Path has no segments; it finds nothing and deletes nothing.
type Path struct {
	segments []string
}

// New returns the path through the given keys; Parse(New(keys...).String())
// yields an equal path.
func New(keys ...string) Path {
	return Path{segments: append([]string(nil), keys...)}
}

// Segments returns a copy of the keys the path descends through.
func (p Path) Segments() []string {
	return append([]string(nil), p.segments...)
}

// Len is the number of segments.
func (p Path) Len() int { return len(p.segments) }

// Parse parses a field path expression. It also takes the field paths of
// client-go's JSONPath notation, `{.metadata.labels.app}`, where a
// backslash escapes a character of a field name
// (`{.metadata.labels.kubernetes\.io/service-name}`); JSONPath's other
// features (filters, ranges, wildcards) have no meaning for one index key and
// are refused.
func Parse(expr string) (Path, error) {
	ps := parser{expr: expr, orig: expr}
	if strings.HasPrefix(expr, "{") {
		if len(expr) < 3 || !strings.HasSuffix(expr, "}") || expr[1] != '.' {
			return Path{}, &SyntaxError{Expr: expr, Column: 1, Msg: "a JSONPath field path is written {.field.field}"}
		}
		ps.expr, ps.offset, ps.jsonpath = expr[2:len(expr)-1], 2, true
	}
	segs, err := ps.parse()
	if err != nil {
		return Path{}, err
	}
	return Path{segments: segs}, nil
}

type parser struct {
	expr     string
	orig     string // the expression as given, for errors
	offset   int    // of expr within orig
	jsonpath bool   // backslash escapes in field names
	pos      int
}

func (ps *parser) fail(pos int, format string, args ...any) error {
	return &SyntaxError{Expr: ps.orig, Column: ps.offset + pos + 1, Msg: fmt.Sprintf(format, args...)}
}

func (ps *parser) parse() ([]string, error) {
	if ps.expr == "" {
		return nil, ps.fail(0, "empty expression")
	}
	var segs []string
	first := true
	for ps.pos < len(ps.expr) {
		c := ps.expr[ps.pos]
		switch {
		case c == '[':
			key, err := ps.bracket()
			if err != nil {
				return nil, err
			}
			segs = append(segs, key)
		case c == '.' && !first:
			ps.pos++
			if ps.pos >= len(ps.expr) {
				return nil, ps.fail(ps.pos, "expected a field name after '.', found end of expression")
			}
			if !isIdentByte(ps.expr[ps.pos]) {
				return nil, ps.fail(ps.pos, "expected a field name after '.', found %q", ps.expr[ps.pos])
			}
			segs = append(segs, ps.ident())
		case first && isIdentByte(c):
			segs = append(segs, ps.ident())
		case first:
			return nil, ps.fail(ps.pos, "expected a field name or '[', found %q", c)
		default:
			return nil, ps.fail(ps.pos, "expected '.' or '[', found %q", c)
		}
		first = false
	}
	return segs, nil
}

func (ps *parser) ident() string {
	var b strings.Builder
	for ps.pos < len(ps.expr) {
		c := ps.expr[ps.pos]
		if ps.jsonpath && c == '\\' && ps.pos+1 < len(ps.expr) {
			b.WriteByte(ps.expr[ps.pos+1])
			ps.pos += 2
			continue
		}
		if !isIdentByte(c) && !(ps.jsonpath && c == '/') {
			break
		}
		b.WriteByte(c)
		ps.pos++
	}
	return b.String()
}

// bracket parses ['key'] or ["key"] starting at '['.
func (ps *parser) bracket() (string, error) {
	open := ps.pos
	ps.pos++ // '['
	if ps.pos >= len(ps.expr) {
		return "", ps.fail(ps.pos, "expected a quoted key after '[', found end of expression")
	}
	quote := ps.expr[ps.pos]
	if quote != '\'' && quote != '"' {
		return "", ps.fail(ps.pos, "expected a quoted key after '[', found %q", quote)
	}
	quoteAt := ps.pos
	ps.pos++
	var b strings.Builder
	for {
		if ps.pos >= len(ps.expr) {
			return "", ps.fail(quoteAt, "unterminated quoted key")
		}
		c := ps.expr[ps.pos]
		if c == '\\' {
			if ps.pos+1 >= len(ps.expr) {
				return "", ps.fail(ps.pos, "unterminated escape in quoted key")
			}
			b.WriteByte(ps.expr[ps.pos+1])
			ps.pos += 2
			continue
		}
		ps.pos++
		if c == quote {
			break
		}
		b.WriteByte(c)
	}
	if ps.pos >= len(ps.expr) {
		return "", ps.fail(open, "unclosed '['")
	}
	if ps.expr[ps.pos] != ']' {
		return "", ps.fail(ps.pos, "expected ']' after quoted key, found %q", ps.expr[ps.pos])
	}
	ps.pos++
	return b.String(), nil
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isIdentByte(s[i]) {
			return false
		}
	}
	return true
}

// String renders the path in canonical form: identifiers dotted, other keys
// as ['key'] with quotes and backslashes escaped. Parse(p.String()) yields
// an equal path.
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p.segments {
		if isIdent(s) {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
			continue
		}
		b.WriteString("['")
		for j := 0; j < len(s); j++ {
			if s[j] == '\'' || s[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[j])
		}
		b.WriteString("']")
	}
	return b.String()
}

// Equal reports whether both paths have the same segments.
func (p Path) Equal(q Path) bool {
	if len(p.segments) != len(q.segments) {
		return false
	}
	for i := range p.segments {
		if p.segments[i] != q.segments[i] {
			return false
		}
	}
	return true
}

// Lookup returns the value the path names in obj and whether it is present.
// Every step but the last must be a map[string]any; a missing key or a
// non-map on the way yields (nil, false). A present key holding nil yields
// (nil, true).
func (p Path) Lookup(obj map[string]any) (any, bool) {
	if len(p.segments) == 0 || obj == nil {
		return nil, false
	}
	cur := obj
	last := len(p.segments) - 1
	for i, s := range p.segments {
		v, ok := cur[s]
		if !ok {
			return nil, false
		}
		if i == last {
			return v, true
		}
		next, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return nil, false
}

// Delete removes the leaf the path names from its parent map and reports
// whether it was present. Nothing else in obj changes.
func (p Path) Delete(obj map[string]any) bool {
	if len(p.segments) == 0 || obj == nil {
		return false
	}
	cur := obj
	last := len(p.segments) - 1
	for _, s := range p.segments[:last] {
		next, ok := cur[s].(map[string]any)
		if !ok {
			return false
		}
		cur = next
	}
	if _, ok := cur[p.segments[last]]; !ok {
		return false
	}
	delete(cur, p.segments[last])
	return true
}
