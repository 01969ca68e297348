package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
)

// python is Debian's interpreter, which sees the python3-jinja2 package.
const python = "/usr/bin/python3"

// jinja2Result is what testdata/jinja2_render.py prints.
type jinja2Result struct {
	MsMedian    float64 `json:"ms_median"`
	MsMin       float64 `json:"ms_min"`
	CPUMsMedian float64 `json:"cpu_ms_median"`
	Bytes       int     `json:"bytes"`
	Renders     int     `json:"renders"`
}

// jinja2Part is what a test names when Python's Jinja2 is missing.
const jinja2Part = python + " with Jinja2 (apt-get install python3-jinja2)"

// jinja2Missing returns nil when Debian's Python with Jinja2 is installed
// (apt-get install python3-jinja2), else what is wrong.
func jinja2Missing() error {
	out, err := exec.Command(python, "-c", "import jinja2").CombinedOutput()
	if err != nil {
		// The last line of a traceback says what is missing.
		lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
		return fmt.Errorf("%s -c 'import jinja2': %w: %s", python, err, lines[len(lines)-1])
	}
	return nil
}

// writeJinja2Input writes the index's objects (with their index key
// tuples), the values, spec's snippets, fragments and outputs, and the
// outputs' paths (for get_path; see LibrarySpec) as JSON files in dir.
func writeJinja2Input(tb testing.TB, dir string, ix *index.Index, spec engine.Spec, paths map[string]string) (data, templates string) {
	tb.Helper()
	type object struct {
		ID   string         `json:"id"`
		Keys []string       `json:"keys"`
		Obj  map[string]any `json:"obj"`
	}
	type store struct {
		IndexByCount int      `json:"index_by_count"`
		Objects      []object `json:"objects"`
	}
	types := map[string]store{}
	for _, typ := range ix.Types() {
		st := ix.Store(typ)
		s := store{IndexByCount: len(st.IndexBy()), Objects: []object{}}
		for _, it := range st.Items() {
			keys, _ := st.Keys(it.ID)
			s.Objects = append(s.Objects, object{ID: it.ID, Keys: keys, Obj: it.Object()})
		}
		types[typ] = s
	}
	type output struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
		Text string `json:"text"`
	}
	outs := make([]output, len(spec.Outputs))
	for i, o := range spec.Outputs {
		outs[i] = output{Kind: string(o.Kind), Name: o.Name, Text: o.Text}
	}
	type fragment struct {
		ForEach string `json:"for_each"`
		Text    string `json:"text"`
	}
	frags := map[string]fragment{}
	for name, f := range spec.Fragments {
		frags[name] = fragment{ForEach: f.ForEach, Text: f.Text}
	}
	data = filepath.Join(dir, "data.json")
	templates = filepath.Join(dir, "templates.json")
	write := func(path string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	write(data, map[string]any{"types": types, "values": Values})
	write(templates, map[string]any{"snippets": spec.Snippets, "fragments": frags, "outputs": outs, "paths": paths})
	return data, templates
}

// runJinja2 renders with testdata/jinja2_render.py iterations times; with
// outDir it also writes the outputs there.
func runJinja2(tb testing.TB, data, templates string, iterations int, outDir string) jinja2Result {
	tb.Helper()
	script, err := filepath.Abs("testdata/jinja2_render.py")
	if err != nil {
		tb.Fatal(err)
	}
	args := []string{script, data, templates, fmt.Sprint(iterations)}
	if outDir != "" {
		args = append(args, outDir)
	}
	cmd := exec.Command(python, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("jinja2: %v\n%s", err, stderr.String())
	}
	var res jinja2Result
	if err := json.Unmarshal(out, &res); err != nil {
		tb.Fatalf("jinja2 printed %q: %v", out, err)
	}
	return res
}
