package msg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// A bundle's manifest lists every chunk of every file, one reference a
// line: thousands of lines for a large haproxy.cfg, encoded by each render
// and decoded by each stage that loads the bundle. encoding/json's
// reflection made that several milliseconds a side at 10,000 Ingresses.
// appendManifest and parseManifest do the same for this one shape: the
// encoder writes exactly the bytes json.MarshalIndent writes (so the
// manifest's chunks are the same whichever wrote them), and the decoder
// reads what that encoder writes and declines anything else (another
// spacing, key order or field, an escaped string), which encoding/json
// then decodes.

// appendManifest appends the envelope of m ({"schema", "body"}) as
// json.MarshalIndent(v, "", "") writes it.
func appendManifest(out []byte, m BundleManifest) []byte {
	size := 256 + len(m.Target) + len(m.Base) + len(m.Main) + len(m.Hash)
	for _, f := range m.Files {
		size += 96 + len(f.Path) + len(f.Kind) + len(f.Name) + len(f.Chunks)*(2*32+4)
	}
	out = slices.Grow(out, size)
	out = append(out, "{\n\"schema\": "...)
	out = appendJSONString(out, m.Schema())
	out = append(out, ",\n\"body\": {\n\"target\": "...)
	out = appendJSONString(out, m.Target)
	out = append(out, ",\n\"base\": "...)
	out = appendJSONString(out, m.Base)
	out = append(out, ",\n\"main\": "...)
	out = appendJSONString(out, m.Main)
	out = append(out, ",\n\"hash\": "...)
	out = appendJSONString(out, m.Hash)
	out = append(out, ",\n\"files\": "...)
	if m.Files == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, '[')
		for i, f := range m.Files {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, "\n{\n\"path\": "...)
			out = appendJSONString(out, f.Path)
			out = append(out, ",\n\"kind\": "...)
			out = appendJSONString(out, f.Kind)
			out = append(out, ",\n\"name\": "...)
			out = appendJSONString(out, f.Name)
			out = append(out, ",\n\"size\": "...)
			out = strconv.AppendInt(out, int64(f.Size), 10)
			out = append(out, ",\n\"chunks\": "...)
			out = appendStrings(out, f.Chunks)
			out = append(out, "\n}"...)
		}
		if len(m.Files) > 0 {
			out = append(out, '\n')
		}
		out = append(out, ']')
	}
	return append(out, "\n}\n}"...)
}

// appendStrings appends a []string as MarshalIndent with no indent does.
func appendStrings(out []byte, s []string) []byte {
	if s == nil {
		return append(out, "null"...)
	}
	out = append(out, '[')
	for i, c := range s {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '\n')
		out = appendJSONString(out, c)
	}
	if len(s) > 0 {
		out = append(out, '\n')
	}
	return append(out, ']')
}

// escaped are the bytes encoding/json does not write as they are in a
// string: control bytes, '"', '\\', the HTML-sensitive '<', '>' and '&', and
// (for invalid UTF-8 and U+2028, U+2029) every byte of a multi-byte rune.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&'
	}
	return t
}()

// appendJSONString appends s quoted as encoding/json quotes it: a string
// of plain printable ASCII as it is, any other through encoding/json.
func appendJSONString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if escaped[s[i]] {
			b, _ := json.Marshal(s) // a string always encodes
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}

// parseManifest reads a manifest envelope as appendManifest writes it.
// ok is false for anything else, including a valid JSON of another
// spacing: the caller then decodes it with encoding/json.
func parseManifest(data []byte) (m BundleManifest, schema string, ok bool) {
	p := manifestParser{data: data, src: string(data), ok: true}
	schema = p.strAfter("{\n\"schema\": ")
	m.Target = p.strAfter(",\n\"body\": {\n\"target\": ")
	m.Base = p.strAfter(",\n\"base\": ")
	m.Main = p.strAfter(",\n\"main\": ")
	m.Hash = p.strAfter(",\n\"hash\": ")
	p.lit(",\n\"files\": ")
	switch {
	case p.try("null"):
	case p.try("[]"):
		m.Files = []ManifestFile{}
	default:
		p.lit("[")
		for p.ok {
			var f ManifestFile
			f.Path = p.strAfter("\n{\n\"path\": ")
			f.Kind = p.strAfter(",\n\"kind\": ")
			f.Name = p.strAfter(",\n\"name\": ")
			p.lit(",\n\"size\": ")
			f.Size = p.int()
			p.lit(",\n\"chunks\": ")
			f.Chunks = p.strs()
			p.lit("\n}")
			m.Files = append(m.Files, f)
			if !p.try(",") {
				break
			}
		}
		p.lit("\n]")
	}
	p.lit("\n}\n}")
	if !p.ok || p.i != len(data) {
		return BundleManifest{}, "", false
	}
	return m, schema, true
}

// manifestParser reads data from i; once a read fails, ok is false and
// every later read answers nothing. The strings it returns are parts of
// src, data's one copy: thousands of chunk references cost one
// allocation.
type manifestParser struct {
	data []byte
	src  string
	i    int
	ok   bool
}

func (p *manifestParser) fail() { p.ok, p.i = false, len(p.data) }

// lit reads s.
func (p *manifestParser) lit(s string) {
	if !p.try(s) {
		p.fail()
	}
}

// try reads s if it is next.
func (p *manifestParser) try(s string) bool {
	if p.ok && len(p.data)-p.i >= len(s) && string(p.data[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// strAfter reads lit, then a string (str).
func (p *manifestParser) strAfter(lit string) string {
	p.lit(lit)
	return p.str()
}

// str reads a string without escapes or bytes encoding/json would have
// escaped.
func (p *manifestParser) str() string {
	if !p.try(`"`) {
		p.fail()
		return ""
	}
	end := bytes.IndexByte(p.data[p.i:], '"')
	if end < 0 {
		p.fail()
		return ""
	}
	for _, c := range p.data[p.i : p.i+end] {
		if escaped[c] {
			p.fail()
			return ""
		}
	}
	s := p.src[p.i : p.i+end]
	p.i += end + 1
	return s
}

// int reads a decimal integer as strconv writes it.
func (p *manifestParser) int() int {
	if !p.ok {
		return 0
	}
	j := p.i
	if j < len(p.data) && p.data[j] == '-' {
		j++
	}
	for j < len(p.data) && p.data[j] >= '0' && p.data[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(string(p.data[p.i:j]))
	if err != nil || strconv.Itoa(n) != string(p.data[p.i:j]) {
		p.fail()
		return 0
	}
	p.i = j
	return n
}

// strs reads a list of strings as appendStrings writes it.
func (p *manifestParser) strs() []string {
	switch {
	case p.try("null"):
		return nil
	case p.try("[]"):
		return []string{}
	}
	p.lit("[")
	var out []string
	for p.ok {
		p.lit("\n")
		out = append(out, p.str())
		if !p.try(",") {
			break
		}
	}
	p.lit("\n]")
	return out
}

// encodeManifest is encodeIndented for a manifest (appendManifest).
func encodeManifest(m BundleManifest) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.Schema(), err)
	}
	return appendManifest(nil, m), nil
}

// decodeManifest is decodeIndented for a manifest: parseManifest, or
// encoding/json for what it declines.
func decodeManifest(data []byte, m *BundleManifest) error {
	got, schema, ok := parseManifest(data)
	if !ok {
		return decodeIndented(data, m)
	}
	if schema != m.Schema() {
		return fmt.Errorf("decode %s: %w: schema %q", m.Schema(), ErrUnknownVersion, schema)
	}
	*m = got
	return m.Validate()
}
