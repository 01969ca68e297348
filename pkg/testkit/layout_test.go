package testkit_test

import (
	"bufio"
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// servicesPath is the import path prefix of every service module.
const servicesPath = "github.com/weftio/weft/services/"

// TestModuleBoundaries keeps the services independent: no module under
// services/ requires or imports another service's module (in any Go file,
// tests included), and no module under pkg/ requires or imports a service.
// What two services share lives in a pkg/ module.
func TestModuleBoundaries(t *testing.T) {
	root := repoRoot(t)
	rules := []struct {
		glob string
		// own is the one service a module may import, from its folder.
		own func(dir string) string
	}{
		{"services/*/go.mod", func(dir string) string { return filepath.Base(dir) }},
		{"pkg/*/go.mod", func(string) string { return "" }},
	}
	checked := 0
	for _, r := range rules {
		mods, err := filepath.Glob(filepath.Join(root, r.glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, gomod := range mods {
			dir := filepath.Dir(gomod)
			rel, _ := filepath.Rel(root, dir)
			own := r.own(dir)
			t.Run(rel, func(t *testing.T) {
				for _, p := range moduleViolations(t, dir, own) {
					t.Error(p)
				}
			})
			checked++
		}
	}
	if checked < 2 {
		t.Fatalf("found %d modules under %s: not the repository layout", checked, root)
	}
}

// moduleViolations lists the requires of dir's go.mod and the imports of
// the Go files of its module that name a service other than own.
func moduleViolations(t *testing.T, dir, own string) []string {
	t.Helper()
	foreign := func(path string) bool {
		svc, ok := strings.CutPrefix(path, servicesPath)
		if !ok {
			return false
		}
		svc, _, _ = strings.Cut(svc, "/")
		return svc != own
	}
	var out []string
	for _, m := range requires(t, filepath.Join(dir, "go.mod")) {
		if foreign(m) {
			out = append(out, "go.mod requires "+m)
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != dir {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a module of its own
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if foreign(p) {
				rel, _ := filepath.Rel(dir, path)
				out = append(out, rel+" imports "+p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requires returns the module paths a go.mod requires.
func requires(t *testing.T, gomod string) []string {
	t.Helper()
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inBlock := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case inBlock && fields[0] == ")":
			inBlock = false
		case inBlock:
			out = append(out, fields[0])
		case fields[0] == "require" && len(fields) == 2 && fields[1] == "(":
			inBlock = true
		case fields[0] == "require" && len(fields) >= 3:
			out = append(out, fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// repoRoot is the folder of the go.work above the working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the working directory")
		}
		dir = parent
	}
}
