package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/config/confdir"
)

// confdExample is a confd confdir with three resources, two sharing a
// folder, over the values of a file source.
const confdExample = "../../examples/confd"

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// confdFiles are the files the example deploys, by golden file.
var confdFiles = map[string]string{
	"app.conf.golden":       "app/app.conf",
	"upstreams.conf.golden": "app/upstreams.conf",
	"cache.json.golden":     "cache/cache.json",
}

// golden compares the deployed file out (below the stack's out/) with
// testdata/confd/<name>, or rewrites the golden file with -update.
func (s *stack) golden(name, out string) error {
	got := s.read(out)
	p := filepath.Join("testdata", "confd", name)
	if *update && got != "" {
		return os.WriteFile(p, []byte(got), 0o644)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if got != string(want) {
		return fmt.Errorf("%s =\n%s\nwant (%s)\n%s", out, got, p, want)
	}
	return nil
}

// writeValues replaces the example's values file as an editor would.
func (s *stack) writeValues(old, new string) {
	s.t.Helper()
	p := filepath.Join(s.dir, "values.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		s.t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		s.t.Fatalf("values.yaml does not contain %q", old)
	}
	tmp := p + ".tmp~"
	if err := os.WriteFile(tmp, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		s.t.Fatal(err)
	}
}

// renders counts the renders of each target so far (every render, also
// those whose output did not change).
func (s *stack) renders() map[string]uint64 {
	s.t.Helper()
	families, err := s.env.Registry.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "weft_renderer_render_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" {
					out[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// deployError is the last deploy error of a target's only instance.
func (s *stack) deployError(target string) string {
	for _, d := range s.target(target).Deploys {
		return d.LastError
	}
	return ""
}

// TestConfdExample runs the confd example through every service: the
// three resources are rendered from the file source, validated and
// deployed into two folders (two resources share one) as the golden files
// say; a value change re-renders only the resource that selects it; output
// that is not its output_format, or that check_cmd refuses, keeps the old
// file.
func TestConfdExample(t *testing.T) {
	s := startStack(t, confdExample, nil)
	for golden, out := range confdFiles {
		waitFor(t, "first deploy of "+out, func() error { return s.golden(golden, out) })
	}
	if fi, err := os.Stat(s.out("app/app.conf")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("app.conf: %v, mode %v, want 0640", err, fi.Mode().Perm())
	}
	waitFor(t, "one reload per resource", func() error {
		return sameLines(s.read("reloads.log"), "app", "cache", "upstreams")
	})

	// A changed value and then a new one, both under the upstreams key.
	before := s.renders()
	s.writeValues("    web2: 10.0.0.2:80\n", "    web2: 10.0.0.9:8080\n")
	waitFor(t, "changed upstream deployed", func() error { return contains(s.read("app/upstreams.conf"), "server web2 10.0.0.9:8080\n") })
	waitFor(t, "only upstreams reloaded", func() error {
		return sameLines(s.read("reloads.log"), "app", "cache", "upstreams", "upstreams")
	})
	s.writeValues("    web2: 10.0.0.9:8080\n", "    web2: 10.0.0.9:8080\n    web3: 10.0.0.3:80\n")
	waitFor(t, "new upstream deployed", func() error { return s.golden("upstreams-changed.conf.golden", "app/upstreams.conf") })
	time.Sleep(300 * time.Millisecond) // anything else the changes poked has had its debounce
	after := s.renders()
	for target, more := range map[string]bool{"app-upstreams": true, "app-app": false, "app-cache": false} {
		if (after[target] > before[target]) != more {
			t.Errorf("%s rendered %d times before the changes and %d after; want a render: %v", target, before[target], after[target], more)
		}
	}

	s.writeValues("    size: 256\n", "    size: big\n")
	waitFor(t, "output_format refused", func() error {
		v := s.target("app-cache").Validation
		if v == nil || v.OK || len(v.Problems) == 0 {
			return errNotYet
		}
		return contains(v.Problems[0].Message, "output_format")
	})
	if err := s.golden("cache.json.golden", "cache/cache.json"); err != nil {
		t.Errorf("the refused JSON replaced the old file: %v", err)
	}

	s.writeValues("  port: 8080\n", "  port: eighty\n")
	waitFor(t, "check_cmd refused", func() error { return contains(s.deployError("app-app"), "check_cmd") })
	if err := s.golden("app.conf.golden", "app/app.conf"); err != nil {
		t.Errorf("the refused file replaced the old one: %v", err)
	}
	s.writeValues("  port: eighty\n", "  port: 8081\n")
	waitFor(t, "fixed value deployed", func() error { return contains(s.read("app/app.conf"), "port = 8081\n") })
	waitFor(t, "deploy error cleared", func() error {
		if e := s.deployError("app-app"); e != "" {
			return errors.New(e)
		}
		return nil
	})
}

// TestConfdBrokenTemplate: a template that does not parse fails its own
// resource, named with the template's file, and the others still deploy.
func TestConfdBrokenTemplate(t *testing.T) {
	s := startStackWith(t, confdExample, func(dir string) {
		p := filepath.Join(dir, "confdir", "templates", "upstreams.conf.tmpl")
		if err := os.WriteFile(p, []byte("{{range gets \"/upstreams/*\"}}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}, nil, nil)
	waitFor(t, "render failure reported", func() error {
		r := s.target("app-upstreams").Render
		if r == nil {
			return errNotYet
		}
		return contains(r.LastError, "upstreams.conf.tmpl")
	})
	for _, golden := range []string{"app.conf.golden", "cache.json.golden"} {
		waitFor(t, golden, func() error { return s.golden(golden, confdFiles[golden]) })
	}
	if _, err := os.Stat(s.out("app/upstreams.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upstreams.conf deployed from a broken template: %v", err)
	}
}

// TestConfdBadResource: a conf.d file that does not decode stops the
// configuration from loading, and the error names the file and line.
func TestConfdBadResource(t *testing.T) {
	tests := []struct {
		name, file, content string
		want                []string
	}{
		{"toml syntax", "cache.toml", "[template\nsrc = \"cache.json.tmpl\"\n", []string{"cache.toml:2:", "targets.app.confd"}},
		{"mode as a number", "app.toml", "[template]\nsrc = \"app.conf.tmpl\"\ndest = \"out/a\"\nmode = 0640\n", []string{"app.toml:4: mode:", `mode = "0644"`}},
		{"missing template", "app.toml", "[template]\nsrc = \"nope.tmpl\"\ndest = \"out/a\"\n", []string{"app.toml: src: missing template", "nope.tmpl"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, confdExample, dir)
			if err := os.WriteFile(filepath.Join(dir, "confdir", "conf.d", tc.file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := config.Load(filepath.Join(dir, "weft.yaml"))
			if !errors.Is(err, confdir.ErrConfig) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want a confdir error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// sameLines reports whether text holds exactly the lines want, in any
// order.
func sameLines(text string, want ...string) error {
	got := strings.Fields(text)
	if len(got) != len(want) {
		return fmt.Errorf("lines %q, want %q", got, want)
	}
	count := map[string]int{}
	for _, l := range got {
		count[l]++
	}
	for _, l := range want {
		count[l]--
	}
	for l, n := range count {
		if n != 0 {
			return fmt.Errorf("lines %q, want %q (%q off by %d)", got, want, l, n)
		}
	}
	return nil
}
