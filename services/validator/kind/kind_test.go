package kind_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/validator/kind"
)

func TestTemplateChecker(t *testing.T) {
	cases := []struct {
		name     string
		cfg, m   string
		want     []string // "file:line:severity"
		failures bool
	}{
		{"clean", "global\n", "a b\n# comment\n\n", nil, false},
		{"empty main", "  \n", "a b\n", []string{"haproxy.cfg:0:error"}, true},
		{"map key without value", "global\n", "a b\nlonely\n", []string{"maps/m.map:2:error"}, true},
		{"unrendered syntax warns", "global\n  # {{ x }}\n", "a b\n", []string{"haproxy.cfg:2:warning"}, false},
		{"binary content", "global\x00\n", "a b\n", []string{"haproxy.cfg:0:error"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := msg.NewBundle("t", "/b", "haproxy.cfg", []msg.BundleFile{
				{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(tc.cfg)},
				{Path: "maps/m.map", Kind: msg.FileMap, Content: []byte(tc.m)},
			})
			if err != nil {
				t.Fatal(err)
			}
			ps, err := kind.TemplateChecker{}.Check(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, fmt.Sprintf("%s:%d:%s", p.File, p.Line, p.Severity))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || kind.Failed(ps) != tc.failures {
				t.Fatalf("problems = %v (failed=%v), want %v (failed=%v)", ps, kind.Failed(ps), tc.want, tc.failures)
			}
		})
	}
}

func TestTemplateCheckerOutputFormat(t *testing.T) {
	tc := kind.TemplateChecker{Formats: map[string]string{"app-cache": "json", "app-conf": "toml"}}
	cases := []struct {
		target, content string
		failed          bool
	}{
		{"app-cache", `{"size": 10}`, false},
		{"app-cache", `{"size": }`, true},
		{"app-conf", "size = 10\n", false},
		{"app-conf", "size = \n", true},
		{"other", `{"size": }`, false},
	}
	for _, c := range cases {
		t.Run(c.target+" "+c.content, func(t *testing.T) {
			b, err := msg.NewBundle(c.target, "/etc/app", "out", []msg.BundleFile{{Path: "out", Kind: msg.FileConfig, Content: []byte(c.content)}})
			if err != nil {
				t.Fatal(err)
			}
			ps, err := tc.Check(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			if kind.Failed(ps) != c.failed {
				t.Errorf("problems = %v, want failed=%v", ps, c.failed)
			}
		})
	}
}
