package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// describeSnapshot renders a snapshot as lines that tests compare exactly.
func describeSnapshot(s Snapshot) (objs, errs []string) {
	for _, o := range s.Objects {
		objs = append(objs, fmt.Sprintf("%s @ %s:%d:%d", o, filepath.ToSlash(o.File), o.Doc, o.Line))
	}
	for _, e := range s.Errors {
		errs = append(errs, filepath.ToSlash(e.Error()))
	}
	return objs, errs
}

func TestScanFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dir        string
		wantObjs   []string
		wantErrors []string
	}{
		{
			dir: "multidoc",
			wantObjs: []string{
				"apps/v1 Deployment shop/web @ testdata/multidoc/app.yaml:3:23",
				"v1 ConfigMap crlf @ testdata/multidoc/windows.yaml:1:1",
				"v1 ConfigMap crlf-2 @ testdata/multidoc/windows.yaml:2:6",
				"v1 ConfigMap ended-1 @ testdata/multidoc/ended.yaml:1:1",
				"v1 ConfigMap ended-2 @ testdata/multidoc/ended.yaml:2:6",
				"v1 ConfigMap shop/settings @ testdata/multidoc/app.yaml:1:1",
				"v1 Namespace shop @ testdata/multidoc/namespace.yml:1:2",
				"v1 Secret shop/token @ testdata/multidoc/inline.yaml:1:1",
				"v1 Service shop/web @ testdata/multidoc/app.yaml:2:13",
			},
		},
		{
			dir: "list",
			wantObjs: []string{
				"v1 ConfigMap a @ testdata/list/list.yaml:1:1",
				"v1 ConfigMap b @ testdata/list/list.yaml:1:1",
				"v1 ConfigMap shop/c @ testdata/list/from-kubectl.json:1:1",
			},
			wantErrors: []string{
				"testdata/list/list.yaml: document 1 (line 1): items[2]: v1 ConfigMap: missing metadata.name",
				"testdata/list/list.yaml: document 1 (line 1): items[3] is a string, not a mapping",
				"testdata/list/list.yaml: document 3 (line 21): items of a List is a mapping, not a list",
			},
		},
		{
			dir: "json",
			wantObjs: []string{
				"v1 ConfigMap shop/ok-first @ testdata/json/broken.json:1:1",
				"v1 ConfigMap shop/one @ testdata/json/stream.json:1:1",
				"v1 ConfigMap shop/two @ testdata/json/stream.json:2:3",
				"v1 Service shop/api @ testdata/json/service.json:1:1",
			},
			wantErrors: []string{
				"testdata/json/broken.json: document 2 (line 2): json: line 4, column 28: invalid character '}' looking for beginning of object key string",
			},
		},
		{
			dir: "invalid",
			wantObjs: []string{
				"networking.k8s.io/v1 Ingress shop/shop @ testdata/invalid/ing.yaml:1:1",
				"v1 ConfigMap shop/untouched @ testdata/invalid/valid.yaml:1:1",
				"v1 Service shop/after @ testdata/invalid/ing.yaml:3:18",
			},
			wantErrors: []string{
				"testdata/invalid/ing.yaml: document 2 (line 14): yaml: line 3: mapping values are not allowed in this context",
				"testdata/invalid/tabs.yaml: document 1 (line 1): yaml: line 4: found character that cannot start any token",
				"testdata/invalid/utf16.yaml: the file is UTF-16; save it as UTF-8",
			},
		},
		{
			dir: "missing",
			wantObjs: []string{
				"v1 ConfigMap shop/valid @ testdata/missing/objects.yaml:11:42",
			},
			wantErrors: []string{
				"testdata/missing/objects.yaml: document 1 (line 1): v1 ConfigMap: missing metadata.name",
				"testdata/missing/objects.yaml: document 2 (line 6): missing kind",
				"testdata/missing/objects.yaml: document 3 (line 10): missing apiVersion",
				"testdata/missing/objects.yaml: document 4 (line 14): v1 ConfigMap: missing metadata.name",
				"testdata/missing/objects.yaml: document 5 (line 17): the document is a string, not a mapping",
				"testdata/missing/objects.yaml: document 6 (line 19): the document is a list, not a mapping",
				"testdata/missing/objects.yaml: document 7 (line 22): apiVersion is a number, not a string (quote it)",
				"testdata/missing/objects.yaml: document 8 (line 27): v1 ConfigMap numeric-namespace: metadata.namespace is a number, not a string",
				"testdata/missing/objects.yaml: document 9 (line 33): v1 ConfigMap: metadata.name is empty",
				"testdata/missing/objects.yaml: document 10 (line 38): v1 ConfigMap: metadata is a list, not a mapping",
			},
		},
		{
			// a.yaml sorts before a/x.yaml, although a walk visits a/ first.
			dir: "duplicate",
			wantObjs: []string{
				"v1 ConfigMap other/cfg @ testdata/duplicate/b.yaml:1:1",
				"v1 ConfigMap shop/cfg @ testdata/duplicate/a.yaml:1:1",
			},
			wantErrors: []string{
				"testdata/duplicate/a/x.yaml: document 1 (line 1): duplicate v1 ConfigMap shop/cfg: already defined in testdata/duplicate/a.yaml: document 1 (line 1)",
				"testdata/duplicate/b.yaml: document 2 (line 9): duplicate v1 ConfigMap shop/cfg: already defined in testdata/duplicate/a.yaml: document 1 (line 1)",
				"testdata/duplicate/b.yaml: document 3 (line 17): duplicate v1 ConfigMap other/cfg: already defined in testdata/duplicate/b.yaml: document 1 (line 1)",
			},
		},
		{
			dir: "hidden",
			wantObjs: []string{
				"v1 ConfigMap visible @ testdata/hidden/visible.yaml:1:1",
			},
		},
		{
			dir: "nested",
			wantObjs: []string{
				"v1 ConfigMap deep @ testdata/nested/a/b/c/deep.yml:1:1",
				"v1 ConfigMap last @ testdata/nested/z/last.YAML:1:1",
				"v1 ConfigMap mid @ testdata/nested/a/mid.JSON:1:1",
				"v1 ConfigMap top @ testdata/nested/top.yaml:1:1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			t.Parallel()
			snap, err := Scan(filepath.Join("testdata", tt.dir))
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			objs, errs := describeSnapshot(snap)
			if !reflect.DeepEqual(objs, tt.wantObjs) {
				t.Errorf("objects:\n got %s\nwant %s", strings.Join(objs, "\n     "), strings.Join(tt.wantObjs, "\n     "))
			}
			if !reflect.DeepEqual(errs, tt.wantErrors) {
				t.Errorf("errors:\n got %s\nwant %s", strings.Join(errs, "\n     "), strings.Join(tt.wantErrors, "\n     "))
			}
			for _, e := range snap.Errors {
				if !errors.Is(e, ErrInvalidManifest) {
					t.Errorf("errors.Is(%v, ErrInvalidManifest) = false", e)
				}
			}
		})
	}
}

// find returns the object with the given identity, failing the test when
// there is none.
func find(t *testing.T, s Snapshot, apiVersion, kind, namespace, name string) Object {
	t.Helper()
	for _, o := range s.Objects {
		if o.APIVersion == apiVersion && o.Kind == kind && o.Namespace == namespace && o.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s %s/%s in %d objects", apiVersion, kind, namespace, name, len(s.Objects))
	return Object{}
}

func TestScanBodies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dir                               string
		apiVersion, kind, namespace, name string
		wantJSON                          []string // substrings of the re-encoded body
	}{
		{"multidoc", "v1", "Service", "shop", "web", []string{`"ports":[{"port":8080,"targetPort":80}]`}},
		{"multidoc", "apps/v1", "Deployment", "shop", "web", []string{`"replicas":3`, `"kind":"Deployment"`}},
		{"multidoc", "v1", "ConfigMap", "shop", "settings", []string{`"data":{"mode":"fast"}`}},
		{"json", "v1", "Service", "shop", "api", []string{
			`{"port":443,"protocol":"TCP","targetPort":8443}`,
			`"timeoutSeconds":10800`,
		}},
		{"duplicate", "v1", "ConfigMap", "shop", "cfg", []string{`"data":{"from":"a.yaml"}`}},
		{"list", "v1", "ConfigMap", "shop", "c", []string{`"metadata":{"name":"c","namespace":"shop"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.dir+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			snap, err := Scan(filepath.Join("testdata", tt.dir))
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			o := find(t, snap, tt.apiVersion, tt.kind, tt.namespace, tt.name)
			b, err := json.Marshal(o.Body)
			if err != nil {
				t.Fatalf("encode body: %v", err)
			}
			for _, want := range tt.wantJSON {
				if !strings.Contains(string(b), want) {
					t.Errorf("body %s does not contain %s", b, want)
				}
			}
		})
	}
}

func TestParseError(t *testing.T) {
	t.Parallel()
	cause := errors.New("yaml: line 3: mapping values are not allowed here")
	tests := []struct {
		err  ParseError
		want string
	}{
		{ParseError{File: "manifests/ing.yaml", Doc: 2, Line: 14, Err: cause},
			"manifests/ing.yaml: document 2 (line 14): yaml: line 3: mapping values are not allowed here"},
		{ParseError{File: "manifests/ing.yaml", Doc: 2, Err: cause},
			"manifests/ing.yaml: document 2: yaml: line 3: mapping values are not allowed here"},
		{ParseError{File: "manifests/gone.yaml", Err: fs.ErrNotExist},
			"manifests/gone.yaml: file does not exist"},
		{ParseError{File: "manifests/x.yaml", Line: 4, Err: cause},
			"manifests/x.yaml: line 4: yaml: line 3: mapping values are not allowed here"},
		{ParseError{File: "manifests/x.yaml", Doc: 1, Line: 1},
			"manifests/x.yaml: document 1 (line 1): invalid manifest"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		var err error = tt.err
		if !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("errors.Is(%q, ErrInvalidManifest) = false", tt.want)
		}
		if tt.err.Err != nil && !errors.Is(err, tt.err.Err) {
			t.Errorf("errors.Is(%q, cause) = false", tt.want)
		}
		wrapped := fmt.Errorf("load: %w", err)
		var pe ParseError
		if !errors.As(wrapped, &pe) || pe.File != tt.err.File || pe.Doc != tt.err.Doc {
			t.Errorf("errors.As(%q) = %+v", wrapped, pe)
		}
	}
	if errors.Is(errors.New("other"), ErrInvalidManifest) {
		t.Error("an unrelated error matches ErrInvalidManifest")
	}
}

func TestScanErrorsUnwrapToCause(t *testing.T) {
	t.Parallel()
	snap, err := Scan(filepath.Join("testdata", "json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Errors) != 1 {
		t.Fatalf("got %d errors, want 1", len(snap.Errors))
	}
	var se *json.SyntaxError
	if !errors.As(snap.Errors[0], &se) {
		t.Errorf("errors.As(%v, *json.SyntaxError) = false", snap.Errors[0])
	}
}

// writeFile writes a file, creating its directories.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: shop\ndata:\n  value: %q\n", name, value)
}

func TestScanSymlinks(t *testing.T) {
	t.Parallel()
	// The layout of a mounted ConfigMap: visible links into a hidden,
	// timestamped directory through the "..data" link.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..2025_01_01", "app.yaml"), configMap("app", "v1"))
	writeFile(t, filepath.Join(dir, "elsewhere", "linked.yaml"), configMap("linked-dir", "v1"))
	for _, l := range []struct{ target, link string }{
		{"..2025_01_01", "..data"},
		{filepath.Join("..data", "app.yaml"), "app.yaml"},
		{"missing.yaml", "dangling.yaml"},
		{"missing", "dangling-other"},
		{"elsewhere", "dir-link"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.link)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range snap.Objects {
		names = append(names, o.Name+"@"+filepath.Base(o.File))
	}
	// linked-dir is found by walking elsewhere/, not through dir-link.
	if want := []string{"app@app.yaml", "linked-dir@linked.yaml"}; !reflect.DeepEqual(names, want) {
		t.Errorf("objects = %v, want %v", names, want)
	}
	if len(snap.Errors) != 1 {
		t.Fatalf("errors = %v, want one for dangling.yaml", snap.Errors)
	}
	if e := snap.Errors[0]; e.File != filepath.Join(dir, "dangling.yaml") || !errors.Is(e, fs.ErrNotExist) || !errors.Is(e, ErrInvalidManifest) {
		t.Errorf("error = %v, want a missing-file error for dangling.yaml", e)
	}
}

func TestScanDirectoryErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file.yaml")
	writeFile(t, file, configMap("a", "b"))
	tests := []struct {
		name string
		dir  string
		is   error
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), fs.ErrNotExist},
		{"file", file, errNotDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			snap, err := Scan(tt.dir)
			if !errors.Is(err, tt.is) {
				t.Fatalf("Scan(%s) error = %v, want %v", tt.dir, err, tt.is)
			}
			if len(snap.Objects) != 0 || len(snap.Errors) != 0 {
				t.Errorf("Scan(%s) = %+v with error, want an empty snapshot", tt.dir, snap)
			}
		})
	}
}

func TestScanEmptyDirectory(t *testing.T) {
	t.Parallel()
	snap, err := Scan(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Objects) != 0 || len(snap.Errors) != 0 {
		t.Errorf("snapshot of an empty directory = %+v", snap)
	}
}

func TestScanIsDeterministic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	generateFolder(t, dir, 100)
	// The same identity in many files: the lexically first must win every time.
	for _, p := range []string{"z.yaml", "m/dup.yaml", "a0/dup.yaml", "a.yaml"} {
		writeFile(t, filepath.Join(dir, p), configMap("dup", p))
	}
	first, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(first.Objects); got != 101 {
		t.Fatalf("got %d objects, want 101", got)
	}
	if dup := find(t, first, "v1", "ConfigMap", "shop", "dup"); filepath.Base(dup.File) != "a.yaml" || dup.Body["data"].(map[string]any)["value"] != "a.yaml" {
		t.Errorf("duplicate resolved to %s, want a.yaml", dup.File)
	}
	if len(first.Errors) != 3 {
		t.Errorf("got %d errors, want 3: %v", len(first.Errors), first.Errors)
	}
	for range 3 {
		again, err := Scan(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatal("two scans of an unchanged folder differ")
		}
	}
}

func TestSplitDocuments(t *testing.T) {
	t.Parallel()
	type doc struct {
		line int
		text string
	}
	tests := []struct {
		name string
		in   string
		want []doc
	}{
		{"single", "a: 1\n", []doc{{1, "a: 1\n"}}},
		{"empty", "", []doc{{1, ""}}},
		{"two", "a: 1\n---\nb: 2\n", []doc{{1, "a: 1\n"}, {3, "b: 2\n"}}},
		{"leading marker", "---\na: 1\n", []doc{{1, ""}, {2, "a: 1\n"}}},
		{"marker with comment", "a: 1\n--- # next\nb: 2", []doc{{1, "a: 1\n"}, {3, "b: 2"}}},
		{"marker with spaces", "a: 1\n---  \t\nb: 2", []doc{{1, "a: 1\n"}, {3, "b: 2"}}},
		{"marker with content", "a: 1\n--- {b: 2}\n", []doc{{1, "a: 1\n"}, {2, "--- {b: 2}\n"}}},
		{"crlf", "a: 1\r\n---\r\nb: 2\r\n", []doc{{1, "a: 1\r\n"}, {3, "b: 2\r\n"}}},
		{"marker at end", "a: 1\n---", []doc{{1, "a: 1\n"}, {3, ""}}},
		{"not markers", "a: |\n  ---\n  ...\n----\n---x: 1\n....: 2\n", []doc{{1, "a: |\n  ---\n  ...\n----\n---x: 1\n....: 2\n"}}},
		{"end marker", "a: 1\n...\nb: 2\n... # end\n", []doc{{1, "a: 1\n"}, {3, "b: 2\n"}, {5, ""}}},
		{"end then marker", "a: 1\n...\n---\nb: 2\n", []doc{{1, "a: 1\n"}, {3, ""}, {4, "b: 2\n"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []doc
			for _, c := range splitDocuments([]byte(tt.in)) {
				got = append(got, doc{c.line, string(c.data)})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitDocuments(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestIsBlankDocument(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"", true},
		{"\n \n\t\n", true},
		{"# comment\n  # indented comment\n", true},
		{"a: 1", false},
		{"# comment\nb: 2\n", false},
		{"~", false},
	}
	for _, tt := range tests {
		if got := isBlankDocument([]byte(tt.in)); got != tt.want {
			t.Errorf("isBlankDocument(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestScanLargeFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ok.yaml"), configMap("ok", "1"))
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: no disk space is used.
	if err := f.Truncate(maxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	snap, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, errs := describeSnapshot(snap)
	want := []string{filepath.ToSlash(big) + ": file is larger than 64 MiB"}
	if len(snap.Objects) != 1 || !reflect.DeepEqual(errs, want) {
		t.Errorf("got %d objects and errors %q, want 1 object and %q", len(snap.Objects), errs, want)
	}
}
