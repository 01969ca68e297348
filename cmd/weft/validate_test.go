package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftio/weft/services/validator/haproxycheck"
)

// TestValidateCommand renders the quickstart offline and validates it with
// every kind; then breaks it in three ways and checks each is refused with
// the file and line.
func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	p := filepath.Join(dir, "weft.yaml")
	y, _ := os.ReadFile(p)
	y = []byte(strings.Replace(string(y), "kinds: [haproxy, template]", "kinds: [haproxy, template, syntax, policy]\n      policy:\n        forbid: [{directive: '^option httpclose', reason: 'kills keep-alive'}]", 1))
	if err := os.WriteFile(p, y, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var so, se bytes.Buffer
	if err := run([]string{"render", "--config", p, "--out", out}, &so, &se); err != nil {
		t.Fatalf("render: %v %s", err, se.String())
	}
	cfgFile := filepath.Join(out, "haproxy.cfg")
	good, _ := os.ReadFile(cfgFile)
	cases := []struct {
		name    string
		edit    func(string) string
		refused bool
		want    []string
	}{
		{"valid", func(s string) string { return s }, false, []string{"haproxy: ok", "syntax: ok", "policy: ok", "template: ok"}},
		{"unknown keyword", func(s string) string { return strings.Replace(s, "maxconn 2000", "maxconn 2000\n  frobnicate on", 1) },
			true, []string{"haproxy: refused", "syntax: refused", "error haproxy.cfg:4: unknown keyword"}},
		{"forbidden directive", func(s string) string {
			return strings.Replace(s, "option httplog", "option httplog\n  option httpclose", 1)
		},
			true, []string{"policy: refused", "kills keep-alive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(cfgFile, []byte(tc.edit(string(good))), 0o644); err != nil {
				t.Fatal(err)
			}
			var so, se bytes.Buffer
			err := run([]string{"validate", "--config", p, out}, &so, &se)
			if tc.refused != errors.Is(err, errRefused) || (!tc.refused && err != nil) {
				t.Fatalf("validate = %v\n%s%s", err, so.String(), se.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(so.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, so.String())
				}
			}
		})
	}
}

// TestValidateCommandWithoutHAProxy: without haproxy, `weft validate` runs
// the kinds the target expects when they can run, and names the missing
// binary and how to get it when the target expects the haproxy kind.
func TestValidateCommandWithoutHAProxy(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	p := filepath.Join(dir, "weft.yaml")
	out := filepath.Join(dir, "out")
	var so, se bytes.Buffer
	if err := run([]string{"render", "--config", p, "--out", out}, &so, &se); err != nil {
		t.Fatalf("render: %v %s", err, se.String())
	}
	t.Setenv(haproxycheck.EnvBinary, filepath.Join(t.TempDir(), "haproxy"))

	so.Reset()
	err := run([]string{"validate", "--config", p, out}, &so, &se)
	if !errors.Is(err, haproxycheck.ErrNoBinary) {
		t.Fatalf("validate with the haproxy kind: %v, want haproxycheck.ErrNoBinary\n%s", err, so.String())
	}
	for _, says := range []string{"kind haproxy cannot run here", "apt-get install haproxy"} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("error %q does not say %q", err, says)
		}
	}

	y, _ := os.ReadFile(p)
	if err := os.WriteFile(p, []byte(strings.Replace(string(y), "kinds: [haproxy, template]", "kinds: [template, syntax]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	so.Reset()
	if err := run([]string{"validate", "--config", p, out}, &so, &se); err != nil {
		t.Fatalf("validate with template and syntax: %v\n%s%s", err, so.String(), se.String())
	}
	if got := so.String(); got != "syntax: ok\ntemplate: ok\n" {
		t.Errorf("output %q, want syntax and template ok", got)
	}
}
