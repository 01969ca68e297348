package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Jinja2Python is Debian's interpreter, which sees the python3-jinja2
// package (the pyenv python3 on PATH does not).
const Jinja2Python = "/usr/bin/python3"

// jinja2Script renders as the Go engine documents it (resources stores,
// get_indexed, get_path, register_error, fragments); the renderer's
// benchmarks use the same script.
const jinja2Script = "services/renderer/bench/testdata/jinja2_render.py"

// jinja2Wrapper runs the script (argv[1]) with the filters
// haproxy-template-ic adds to Jinja2's builtins, which its templates use:
// log(x, base=e), as Python's math.log.
const jinja2Wrapper = `
import math, runpy, sys
import jinja2
_init = jinja2.Environment.__init__
def _with_filters(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.filters.setdefault("log", lambda x, base=math.e: math.log(x, base))
jinja2.Environment.__init__ = _with_filters
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
`

// Jinja2Object is one object of a Jinja2Store: its id, its index key
// tuple (computed by the Go index, so both sides index alike) and body.
type Jinja2Object struct {
	ID   string         `json:"id"`
	Keys []string       `json:"keys"`
	Obj  map[string]any `json:"obj"`
}

// Jinja2Store is one watched type: how many index_by paths it has and its
// objects ordered by id.
type Jinja2Store struct {
	IndexByCount int            `json:"index_by_count"`
	Objects      []Jinja2Object `json:"objects"`
}

// Jinja2Output is one template whose output Jinja2Render returns under
// Name; Kind is the engine's kind (config, map, file, cert).
type Jinja2Output struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Text string `json:"text"`
}

// Jinja2Input is what Python's Jinja2 renders: the resources, values,
// snippets and outputs, and Paths answering get_path, keyed
// "<kind>\x00<name>".
type Jinja2Input struct {
	Types    map[string]Jinja2Store `json:"-"`
	Values   map[string]any         `json:"-"`
	Snippets map[string]string      `json:"snippets"`
	Outputs  []Jinja2Output         `json:"outputs"`
	Paths    map[string]string      `json:"paths"`
}

// Jinja2Render renders in with Python's Jinja2 and returns each output by
// name and the registered errors ("<type> <id>: <message>" lines). It ends
// the test through Need when Jinja2 is missing.
func Jinja2Render(tb testing.TB, in Jinja2Input) (outputs map[string]string, errors string) {
	tb.Helper()
	out, err := exec.Command(Jinja2Python, "-c", "import jinja2").CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s -c 'import jinja2': %w: %s", Jinja2Python, err, strings.TrimSpace(string(out)))
	}
	Need(tb, Jinja2Python+" with Jinja2 (apt-get install python3-jinja2)", err)
	root, err := workspaceRoot()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	if in.Values == nil {
		in.Values = map[string]any{}
	}
	data := write("data.json", map[string]any{"types": in.Types, "values": in.Values})
	templates := write("templates.json", in)
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(Jinja2Python, "-c", jinja2Wrapper, filepath.Join(root, jinja2Script), data, templates, "1", outDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("jinja2: %v\n%s", err, stderr.String())
	}
	outputs = map[string]string{}
	for _, o := range in.Outputs {
		b, err := os.ReadFile(filepath.Join(outDir, o.Name))
		if err != nil {
			tb.Fatalf("jinja2 wrote no %s: %v", o.Name, err)
		}
		outputs[o.Name] = string(b)
	}
	b, err := os.ReadFile(filepath.Join(outDir, ".errors"))
	if err != nil {
		tb.Fatal(err)
	}
	return outputs, string(b)
}
