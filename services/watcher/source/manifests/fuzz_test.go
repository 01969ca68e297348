package manifests

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzScanDocument feeds arbitrary bytes to the per-document parsers (YAML
// and JSON) and checks that they never panic and that whatever they return
// keeps the package's promises.
func FuzzScanDocument(f *testing.F) {
	for _, seed := range []string{
		"",
		"~",
		"# only a comment\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: b\n",
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- 7\n",
		"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, metadata: {name: p}}]}\n",
		"apiVersion: v1\nkind: Service\nmetadata: name: broken\n",
		"--- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n",
		"a: &a [*a]\n",
		"a: !!binary aGVsbG8=\n",
		"1: 2\n? [a]\n: b\n",
		"x: .inf\n",
		`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": 3}}`,
		`{"apiVersion": "v1"} {"kind": "List", "items": null} [1]`,
		`{"a": `,
	} {
		f.Add([]byte(seed))
	}
	for _, dir := range []string{"multidoc", "list", "invalid", "missing"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := parseDocument("f.yaml", 3, 7, data)
		check(t, "f.yaml", objs, errs, true)
		objs, errs = parseJSONStream("f.json", data)
		check(t, "f.json", objs, errs, false)
	})
}

func check(t *testing.T, file string, objs []Object, errs []ParseError, fixed bool) {
	t.Helper()
	for _, o := range objs {
		if o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.Body == nil {
			t.Fatalf("object without identity or body: %+v", o)
		}
		if o.File != file || o.Doc < 1 || o.Line < 1 || (fixed && (o.Doc != 3 || o.Line != 7)) {
			t.Fatalf("object %s has location %s:%d:%d", o, o.File, o.Doc, o.Line)
		}
		if _, err := json.Marshal(o.Body); err != nil {
			t.Fatalf("body of %s does not encode: %v", o, err)
		}
	}
	for _, e := range errs {
		if !errors.Is(e, ErrInvalidManifest) || e.Err == nil || e.Error() == "" {
			t.Fatalf("malformed error %#v", e)
		}
		if e.File != file || e.Doc < 1 || e.Line < 1 || (fixed && (e.Doc != 3 || e.Line != 7)) {
			t.Fatalf("error %q has location %s:%d:%d", e, e.File, e.Doc, e.Line)
		}
	}
}
