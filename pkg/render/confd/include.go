package confd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// maxIncludeDepth bounds nested includes, as in confd.
const maxIncludeDepth = 10

// includer is the template function include of one render:
// {{include "partials/upstream.tmpl"}} or {{include "x.tmpl" $data}}
// renders another file of the templates folder, with the same functions
// and store, and with $data (or nil) as dot, and inserts its text. The
// name is resolved under the templates folder and may not leave it; an
// include that is already being rendered (a cycle) and nesting deeper
// than maxIncludeDepth are errors. The file is read at each call, so an
// edited partial is used at the next render.
type includer struct {
	dir    string
	static template.FuncMap
	bound  template.FuncMap
	stack  []string
}

func (in *includer) include(name string, data ...any) (string, error) {
	p := filepath.Clean(filepath.Join(in.dir, name))
	if !isPathWithin(p, in.dir) {
		return "", fmt.Errorf("include path %q is outside template directory", name)
	}
	for _, s := range in.stack {
		if s == p {
			return "", fmt.Errorf("include cycle detected: %s is already being processed", p)
		}
	}
	if len(in.stack) >= maxIncludeDepth {
		return "", fmt.Errorf("maximum include depth (%d) exceeded", maxIncludeDepth)
	}
	in.stack = append(in.stack, p)
	defer func() { in.stack = in.stack[:len(in.stack)-1] }()

	content, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("include %s: %w", name, err)
	}
	t, err := template.New(filepath.Base(p)).Funcs(in.static).Funcs(in.bound).Parse(string(content))
	if err != nil {
		return "", fmt.Errorf("parse include %s: %w", name, err)
	}
	var dot any
	if len(data) > 0 {
		dot = data[0]
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, dot); err != nil {
		return "", fmt.Errorf("execute include %s: %w", name, err)
	}
	return buf.String(), nil
}

// isPathWithin reports whether p is strictly inside dir.
func isPathWithin(p, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	if err != nil {
		return false
	}
	return rel != "." && rel != ".." && !filepath.IsAbs(rel) &&
		!strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
