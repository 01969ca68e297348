package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// utf8BOM is skipped at the start of a file.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// parseFile parses the content of one manifest file, YAML or JSON by its
// extension, into objects and errors in document order.
func parseFile(file string, data []byte) ([]Object, []ParseError) {
	r := parseKnown(file, data, nil)
	return r.objs, r.errs
}

// docSeed seeds the sums of documents. They are compared within one
// process only, never stored, so a seed of its own makes a collision
// nobody can aim at.
var docSeed = maphash.MakeSeed()

// docSum is the sum of one YAML document's bytes; never 0, which stands
// for no sum.
func docSum(data []byte) uint64 {
	return max(maphash.Bytes(docSeed, data), 1)
}

// parseKnown is parseFile that does not parse the YAML documents whose sum
// known (when not nil) reports: each becomes a KeptDoc of the result. The
// objects parsed carry their document's sum. JSON files are parsed whole.
func parseKnown(file string, data []byte, known func(sum uint64) bool) fileResult {
	data = bytes.TrimPrefix(data, utf8BOM)
	if bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE}) {
		return fileResult{errs: []ParseError{{File: file, Err: errors.New("the file is UTF-16; save it as UTF-8")}}}
	}
	if strings.EqualFold(filepath.Ext(file), ".json") {
		objs, errs := parseJSONStream(file, data)
		return fileResult{objs: objs, errs: errs}
	}
	var (
		r   fileResult
		doc int
	)
	for _, c := range splitDocuments(data) {
		if isBlankDocument(c.data) {
			continue
		}
		doc++
		sum := docSum(c.data)
		if known != nil && known(sum) {
			r.kept = append(r.kept, KeptDoc{Sum: sum, Doc: doc, Line: c.line})
			continue
		}
		o, e := parseDocument(file, doc, c.line, c.data)
		for i := range o {
			o[i].sum = sum
		}
		r.objs = append(r.objs, o...)
		r.errs = append(r.errs, e...)
	}
	return r
}

// chunk is one YAML document of a file and the line it starts on.
type chunk struct {
	line int
	data []byte
}

// splitDocuments cuts YAML text at document markers: lines that start with
// "---" followed by nothing, white space or a comment. A marker followed by
// content ("--- {a: 1}") starts the next document on its own line, where the
// YAML parser reads it as an explicit document start. A "..." end marker
// line ends a document too. YAML forbids both markers at the start of a line
// inside a scalar, so this never cuts a value in two.
func splitDocuments(data []byte) []chunk {
	var (
		chunks    []chunk
		start     int
		startLine = 1
		line      = 1
	)
	for off := 0; off < len(data); line++ {
		next := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			next = off + i + 1
		}
		if sep, content := documentMarker(data[off:next]); sep {
			chunks = append(chunks, chunk{line: startLine, data: data[start:off]})
			if content {
				start, startLine = off, line
			} else {
				start, startLine = next, line+1
			}
		} else if endMarker(data[off:next]) {
			chunks = append(chunks, chunk{line: startLine, data: data[start:off]})
			start, startLine = next, line+1
		}
		off = next
	}
	return append(chunks, chunk{line: startLine, data: data[start:]})
}

// documentMarker reports whether a line is a "---" document marker and
// whether content follows the marker on the same line.
func documentMarker(line []byte) (marker, content bool) {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false, false
	}
	rest := line[3:]
	if len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t' && rest[0] != '\r' && rest[0] != '\n' {
		return false, false
	}
	rest = bytes.TrimSpace(rest)
	return true, len(rest) > 0 && rest[0] != '#'
}

// endMarker reports whether a line is a "..." document end marker,
// followed by nothing, white space or a comment.
func endMarker(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("...")) {
		return false
	}
	rest := line[3:]
	if len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t' && rest[0] != '\r' && rest[0] != '\n' {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// isBlankDocument reports whether a document holds nothing but white space
// and comments.
func isBlankDocument(data []byte) bool {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// parseDocument parses one YAML document that starts on line of file and is
// document number doc in it.
func parseDocument(file string, doc, line int, data []byte) ([]Object, []ParseError) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, []ParseError{{File: file, Doc: doc, Line: line, Err: err}}
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		return nil, []ParseError{{File: file, Doc: doc, Line: line, Err: fmt.Errorf("decode document: %w", err)}}
	}
	return objectsOf(file, doc, line, v)
}

// parseJSONStream parses a JSON file: one value or a stream of values, each
// a document.
func parseJSONStream(file string, data []byte) ([]Object, []ParseError) {
	var (
		objs []Object
		errs []ParseError
		lc   = lineCounter{data: data, line: 1}
		dec  = json.NewDecoder(bytes.NewReader(data))
	)
	for doc := 1; ; doc++ {
		start := skipJSONSpace(data, int(dec.InputOffset()))
		if start >= len(data) {
			return objs, errs
		}
		line := lc.lineAt(start)
		var v any
		if err := dec.Decode(&v); err != nil {
			errs = append(errs, ParseError{File: file, Doc: doc, Line: line, Err: jsonError(data, start, line, err)})
			return objs, errs
		}
		o, e := objectsOf(file, doc, line, v)
		objs = append(objs, o...)
		errs = append(errs, e...)
	}
}

// jsonError places a JSON decoding error at a line and column counted from
// the document's first line.
func jsonError(data []byte, start, line int, err error) error {
	off := len(data)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = int(se.Offset)
	} else if !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("json: %w", err)
	}
	off = max(start, min(off, len(data)))
	errLine := line + bytes.Count(data[start:off], []byte("\n"))
	col := off - (bytes.LastIndexByte(data[:off], '\n') + 1)
	if col == 0 {
		col = 1
	}
	return fmt.Errorf("json: line %d, column %d: %w", errLine-line+1, col, err)
}

func skipJSONSpace(data []byte, off int) int {
	for off < len(data) {
		switch data[off] {
		case ' ', '\t', '\r', '\n':
			off++
		default:
			return off
		}
	}
	return off
}

// lineCounter turns increasing byte offsets into line numbers.
type lineCounter struct {
	data []byte
	off  int
	line int
}

func (c *lineCounter) lineAt(off int) int {
	c.line += bytes.Count(c.data[c.off:off], []byte("\n"))
	c.off = off
	return c.line
}

// objectsOf turns one decoded document into objects: a mapping is one
// object, a List is expanded into its items, and nil (an empty document)
// holds nothing.
func objectsOf(file string, doc, line int, v any) ([]Object, []ParseError) {
	if v == nil {
		return nil, nil
	}
	var (
		objs []Object
		errs []ParseError
	)
	var add func(path string, v any)
	add = func(path string, v any) {
		fail := func(err error) {
			if path != "" {
				err = fmt.Errorf("%s: %w", path, err)
			}
			errs = append(errs, ParseError{File: file, Doc: doc, Line: line, Err: err})
		}
		m, ok := v.(map[string]any)
		if !ok {
			what := "the document"
			if path != "" {
				what, path = path, ""
			}
			fail(fmt.Errorf("%s is %s, not a mapping", what, describe(v)))
			return
		}
		if kind, _ := m["kind"].(string); kind == "List" {
			items, ok := m["items"].([]any)
			if !ok && m["items"] != nil {
				fail(fmt.Errorf("items of a List is %s, not a list", describe(m["items"])))
				return
			}
			for i, item := range items {
				add(fmt.Sprintf("%sitems[%d]", prefix(path), i), item)
			}
			return
		}
		obj, err := objectFrom(m)
		if err != nil {
			fail(err)
			return
		}
		obj.File, obj.Doc, obj.Line = file, doc, line
		objs = append(objs, obj)
	}
	add("", v)
	return objs, errs
}

func prefix(path string) string {
	if path == "" {
		return ""
	}
	return path + "."
}

// objectFrom checks that m has an identity and builds its Object.
func objectFrom(m map[string]any) (Object, error) {
	apiVersion, err := requiredString(m, "apiVersion", "apiVersion")
	if err != nil {
		return Object{}, err
	}
	kind, err := requiredString(m, "kind", "kind")
	if err != nil {
		return Object{}, err
	}
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		if m["metadata"] == nil {
			return Object{}, fmt.Errorf("%s %s: missing metadata.name", apiVersion, kind)
		}
		return Object{}, fmt.Errorf("%s %s: metadata is %s, not a mapping", apiVersion, kind, describe(m["metadata"]))
	}
	name, err := requiredString(meta, "name", "metadata.name")
	if err != nil {
		return Object{}, fmt.Errorf("%s %s: %w", apiVersion, kind, err)
	}
	var namespace string
	if ns, present := meta["namespace"]; present && ns != nil {
		s, ok := ns.(string)
		if !ok {
			return Object{}, fmt.Errorf("%s %s %s: metadata.namespace is %s, not a string",
				apiVersion, kind, name, describe(ns))
		}
		namespace = s
	}
	return Object{APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name, Body: m}, nil
}

func requiredString(m map[string]any, key, field string) (string, error) {
	v, present := m[key]
	if !present || v == nil {
		return "", fmt.Errorf("missing %s", field)
	}
	s, ok := v.(string)
	if !ok {
		switch v.(type) {
		case bool, float64:
			// YAML reads unquoted y, no, on, 1.0 and the like as booleans
			// and numbers.
			return "", fmt.Errorf("%s is %s, not a string (quote it)", field, describe(v))
		}
		return "", fmt.Errorf("%s is %s, not a string", field, describe(v))
	}
	if s == "" {
		return "", fmt.Errorf("%s is empty", field)
	}
	return s, nil
}

// describe names the JSON type of v for messages.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return fmt.Sprintf("a %T", v)
	}
}
