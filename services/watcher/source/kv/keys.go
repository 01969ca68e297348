package kv

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// scope is what a source reads: the keys under a prefix that its selectors
// select, and how such a key is named (see the package doc).
type scope struct {
	// prefix is a clean absolute path; "/" when there is none.
	prefix string
	// selectors are clean absolute paths at or under prefix, sorted, none
	// at or under another.
	selectors []string
}

func newScope(prefix string, keys []string) (scope, error) {
	p := path.Join("/", prefix)
	if len(keys) == 0 {
		keys = []string{"/"}
	}
	sels := make([]string, 0, len(keys))
	for _, k := range keys {
		s := path.Join(p, k)
		if !under(s, p) {
			return scope{}, fmt.Errorf("%w: key %q leaves the prefix %q", ErrConfig, k, p)
		}
		sels = append(sels, s)
	}
	return scope{prefix: p, selectors: minimal(sels, "/")}, nil
}

// minimal sorts sels and drops every selector equal to or below another;
// sep separates segments ("/" for paths, "_" for variable names), and ""
// selects everything.
func minimal(sels []string, sep string) []string {
	sels = slices.Clone(sels)
	slices.Sort(sels)
	out := sels[:0]
	for _, s := range sels {
		covered := false
		for _, k := range out {
			if k == "" || k == sep || s == k || strings.HasPrefix(s, k+sep) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	return out
}

// under reports whether the clean absolute path p is sel or below it.
func under(p, sel string) bool {
	if sel == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == sel || (len(p) > len(sel) && p[len(sel)] == '/' && strings.HasPrefix(p, sel))
}

// name returns the name of the backend key k (a path), and whether the
// scope selects it.
func (s scope) name(k string) (string, bool) {
	if !strings.HasPrefix(k, "/") {
		return "", false
	}
	p := path.Clean(k)
	for _, sel := range s.selectors {
		if under(p, sel) {
			return s.trim(p), true
		}
	}
	return "", false
}

// trim removes the prefix from the selected clean path p.
func (s scope) trim(p string) string {
	if s.prefix == "/" {
		return p
	}
	if rest := p[len(s.prefix):]; rest != "" {
		return rest
	}
	return "/"
}

// natskv: paths and KV keys.

func plainKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

const upperHex = "0123456789ABCDEF"

// kvKey encodes the clean absolute path p as a KV key ("" for "/").
func kvKey(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 1; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			b.WriteByte('.')
		case plainKeyByte(c):
			b.WriteByte(c)
		default:
			b.WriteByte('=')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String()
}

// kvPath decodes a KV key written by kvKey; a key that is not exactly the
// encoding of a clean path is an error.
func kvPath(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("empty key")
	}
	var b strings.Builder
	b.Grow(len(key) + 1)
	for seg := range strings.SplitSeq(key, ".") {
		if seg == "" {
			return "", fmt.Errorf("empty segment")
		}
		start := b.Len()
		b.WriteByte('/')
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			switch {
			case plainKeyByte(c):
				b.WriteByte(c)
			case c == '=':
				if i+2 >= len(seg) {
					return "", fmt.Errorf("'=' is not followed by two hex digits")
				}
				hi, lo := unhex(seg[i+1]), unhex(seg[i+2])
				if hi < 0 || lo < 0 {
					return "", fmt.Errorf("'=' is not followed by two upper-case hex digits")
				}
				d := byte(hi<<4 | lo)
				if plainKeyByte(d) {
					return "", fmt.Errorf("%q needs no escape", seg[i:i+3])
				}
				if d == '/' {
					return "", fmt.Errorf("%q would put a '/' inside a segment", seg[i:i+3])
				}
				b.WriteByte(d)
				i += 2
			case c == '/':
				return "", fmt.Errorf("'/' is not a separator in KV keys, '.' is")
			default:
				return "", fmt.Errorf("%q is not allowed in a segment (escape it as =%02X)", c, c)
			}
		}
		if s := b.String()[start+1:]; s == "." || s == ".." {
			return "", fmt.Errorf("segment %q", s)
		}
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// kvFilters are the KV subject filters that read exactly the selectors.
func (s scope) kvFilters() []string {
	var out []string
	for _, sel := range s.selectors {
		if sel == "/" {
			return []string{">"}
		}
		k := kvKey(sel)
		out = append(out, k, k+".>")
	}
	return out
}

// env: paths and variable names, as confd maps them.

// envName maps a clean absolute path to a variable name: /a/b is A_B.
func envName(p string) string {
	return strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "_"))
}

// envPath maps (part of) a variable name to a clean absolute path: A_B is /a/b.
func envPath(name string) string {
	return path.Join("/", strings.ReplaceAll(strings.ToLower(name), "_", "/"))
}

// envScope selects variables by name.
type envScope struct {
	prefix    string   // envName of the scope's prefix ("" for none)
	selectors []string // envName of each selector, minimal
}

func (s scope) env() envScope {
	sels := make([]string, len(s.selectors))
	for i, sel := range s.selectors {
		sels[i] = envName(sel)
	}
	return envScope{prefix: envName(s.prefix), selectors: minimal(sels, "_")}
}

// name returns the name of the variable v, and whether it is selected.
func (s envScope) name(v string) (string, bool) {
	for _, sel := range s.selectors {
		if sel == "" || v == sel || strings.HasPrefix(v, sel+"_") {
			return envPath(v[len(s.prefix):]), true
		}
	}
	return "", false
}
