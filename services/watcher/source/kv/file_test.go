package kv

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
)

// TestFileFlatten checks the flattening of documents against what confd's
// file backend gives.
func TestFileFlatten(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		file    string
		content string
		want    map[string]string
		err     string
	}{
		{
			name: "nested mappings and lists", file: "v.yaml",
			content: "myapp:\n  database:\n    url: postgres://db\n    user: app\n  upstreams:\n    - 10.0.0.1\n    - host: b\n      port: 81\n",
			want: map[string]string{
				"/myapp/database/url": "postgres://db", "/myapp/database/user": "app",
				"/myapp/upstreams/0": "10.0.0.1", "/myapp/upstreams/1/host": "b", "/myapp/upstreams/1/port": "81",
			},
		},
		{
			name: "scalars as YAML 1.1 reads them", file: "v.yml",
			content: "int: 8080\nneg: -3\nfloat: 1.50\nexp: 1e3\nsmall: 0.000001\nbool: true\ny1: yes\no1: off\nquoted: \"yes\"\n" +
				"null: null\ntilde: ~\nempty_map: {}\nempty_list: []\nstamp: 2024-01-02\nbig: 18446744073709551615\nmulti: |\n  a\n  b\n",
			want: map[string]string{
				"/int": "8080", "/neg": "-3", "/float": "1.5", "/exp": "1000", "/small": "0.000001",
				"/bool": "true", "/y1": "true", "/o1": "false", "/quoted": "yes",
				"/stamp": "2024-01-02", "/big": "18446744073709551615", "/multi": "a\nb\n",
			},
		},
		{
			name: "keys that are not strings, and keys holding slashes", file: "v.yaml",
			content: "1: one\nyes: t\n2.5: f\na/b: nested\n/lead: x\n",
			want:    map[string]string{"/1": "one", "/true": "t", "/2.5": "f", "/a/b": "nested", "/lead": "x"},
		},
		{
			name: "two paths to one name: the first in key order is kept", file: "v.yaml",
			content: "a:\n  b: inner\na/b: flat\n",
			want:    map[string]string{"/a/b": "inner"},
		},
		{
			name: "top-level list", file: "v.yaml",
			content: "- a\n- b: c\n",
			want:    map[string]string{"/0": "a", "/1/b": "c"},
		},
		{
			name: "first document only", file: "v.yaml",
			content: "a: 1\n---\nb: 2\n",
			want:    map[string]string{"/a": "1"},
		},
		{name: "empty file", file: "v.yaml", content: "", want: map[string]string{}},
		{
			name: "JSON with tabs and exact numbers", file: "v.JSON",
			content: "{\n\t\"port\": 8080,\n\t\"ratio\": 1.50,\n\t\"exp\": 1e3,\n\t\"big\": 18446744073709551615,\n\t\"esc\": \"a\\/b\\u00e9\",\n\t\"list\": [true, null, {\"k\": \"v\"}]\n}\n",
			want: map[string]string{
				"/port": "8080", "/ratio": "1.5", "/exp": "1000", "/big": "18446744073709551615",
				"/esc": "a/bé", "/list/0": "true", "/list/2/k": "v",
			},
		},
		{name: "JSON with two values", file: "v.json", content: "{}\n{}\n", err: "more than one JSON value"},
		{name: "broken JSON", file: "v.json", content: "{\"a\": }", err: "invalid character"},
		{name: "broken YAML", file: "v.yaml", content: "a: [1, 2\n", err: "yaml"},
		{name: "a scalar", file: "v.yaml", content: "just text\n", err: "not a mapping or a list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), c.file)
			if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := New(config.Source{Type: config.SourceFile, Path: p})
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.(*fileSource).read()
			if c.err != "" {
				if err == nil || !errors.Is(err, ErrInvalidData) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("read: %v; want ErrInvalidData containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for name, e := range l.vals {
				got[name] = e.value
			}
			if !maps.Equal(got, c.want) {
				t.Errorf("got  %s\nwant %s", describe(got), describe(c.want))
			}
		})
	}
}

// TestFileSaves changes the file the ways editors and Kubernetes do, with
// no rescan: each change must be seen through file notifications.
func TestFileSaves(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		save func(t *testing.T, path string, data []byte)
	}{
		{"in place", func(t *testing.T, path string, data []byte) {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"new file renamed over", func(t *testing.T, path string, data []byte) { writeRenamed(t, path, data) }},
		{"backup renamed away, then written", func(t *testing.T, path string, data []byte) {
			if err := os.Rename(path, path+"~"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path + "~"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(p, []byte("a: 1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			rec := newRecorder(t)
			start(t, mustNew(t, config.Source{Type: config.SourceFile, Path: p, Rescan: config.Duration(time.Hour)}, fast...), rec)
			waitValues(t, rec, map[string]string{"/a": "1"})
			for i, v := range []string{"2", "3", "4"} {
				c.save(t, p, []byte("a: "+v+"\nb: "+v+"\n"))
				waitValues(t, rec, map[string]string{"/a": v, "/b": v})
				if i == 2 {
					c.save(t, p, []byte("b: x\n"))
					waitValues(t, rec, map[string]string{"/b": "x"})
				}
			}
		})
	}
}

// TestFileConfigMapVolume follows a file the way a Kubernetes ConfigMap
// volume updates it: the file is a link through "..data", a link to a
// timestamped folder, and an update swaps "..data".
func TestFileConfigMapVolume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(n, content string) {
		d := filepath.Join(dir, "..2024_"+n)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "values.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink("..2024_"+n, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("1", "a: one\n")
	if err := os.Symlink("..data/values.yaml", filepath.Join(dir, "values.yaml")); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceFile, Path: filepath.Join(dir, "values.yaml"), Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "one"})
	version("2", "a: two\n")
	waitValues(t, rec, map[string]string{"/a": "two"})
}

// TestFileOutage removes the file and breaks it: each is a problem, the
// last values stay, and the source recovers when the file is good again.
func TestFileOutage(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "values.yaml")
	writeRenamed(t, p, []byte("a: 1\n"))
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceFile, Path: p, Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1"})

	n := rec.problemCount()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	waitProblem(t, rec, n, "file: kv: backend unavailable: read "+p, "no such file")
	if got := rec.values(); got["/a"] != "1" {
		t.Errorf("values after the file went: %v, want the last ones kept", got)
	}
	writeRenamed(t, p, []byte("a: 2\n"))
	waitValues(t, rec, map[string]string{"/a": "2"})

	n = rec.problemCount()
	writeRenamed(t, p, []byte("a: [\n"))
	waitProblem(t, rec, n, "file: kv: invalid data: "+p)
	if got := rec.values(); got["/a"] != "2" {
		t.Errorf("values after a broken save: %v, want the last ones kept", got)
	}
	writeRenamed(t, p, []byte("a: 3\n"))
	waitValues(t, rec, map[string]string{"/a": "3"})
	if _, _, _, synced := rec.counts(); synced != 1 {
		t.Errorf("synced %d times", synced)
	}
}

// TestFileMissingAtStart starts before the file, and before its folder,
// exist: nothing is synced until the file is there.
func TestFileMissingAtStart(t *testing.T) {
	t.Parallel()
	for _, nested := range []bool{false, true} {
		name := "file missing"
		if nested {
			name = "folder missing"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if nested {
				dir = filepath.Join(dir, "later")
			}
			p := filepath.Join(dir, "values.json")
			rec := newRecorder(t)
			start(t, mustNew(t, config.Source{Type: config.SourceFile, Path: p, Rescan: config.Duration(time.Hour)}, fast...), rec)
			waitProblem(t, rec, 0, "no such file")
			if _, _, _, synced := rec.counts(); synced != 0 {
				t.Fatal("synced without a file")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeRenamed(t, p, []byte(`{"a": {"b": 1}}`))
			waitValues(t, rec, map[string]string{"/a/b": "1"})
			// Once watched, a change arrives without a rescan.
			writeRenamed(t, p, []byte(`{"a": {"b": 2}}`))
			waitValues(t, rec, map[string]string{"/a/b": "2"})
		})
	}
}
