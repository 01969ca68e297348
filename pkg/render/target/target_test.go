package target_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/target"
)

func tmpl(s string) config.Template { return config.Template{Template: s} }

func TestLayoutAndPaths(t *testing.T) {
	tc := config.Target{
		Base:             "/etc/haproxy",
		TemplateSnippets: map[string]config.Template{"greet": tmpl("hello")},
		Maps:             map[string]config.Template{"host.map": tmpl("a b\n")},
		Files:            map[string]config.Template{"503.http": tmpl("HTTP/1.0 503\n")},
		Certificates:     map[string]config.Template{"site.pem": tmpl("pem\n")},
		HAProxyConfig:    tmpl(`{% include "greet" %} {{ "host.map" | get_path("map") }} {{ "503.http" | get_path("file") }} {{ "site.pem" | get_path("cert") }}` + "\n"),
	}
	tg, err := target.Compile("edge", tc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tg.Render(context.Background(), map[string]any{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"haproxy.cfg":   "hello /etc/haproxy/maps/host.map /etc/haproxy/files/503.http /etc/haproxy/certs/site.pem\n",
		"maps/host.map": "a b\n", "files/503.http": "HTTP/1.0 503\n", "certs/site.pem": "pem\n",
	}
	if len(res.Bundle.Files) != len(want) {
		t.Fatalf("files = %+v", res.Bundle.Files)
	}
	for _, f := range res.Bundle.Files {
		if string(f.Content) != want[f.Path] {
			t.Errorf("%s = %q, want %q", f.Path, f.Content, want[f.Path])
		}
	}
	if res.Bundle.Main != target.MainFile || res.Bundle.Base != "/etc/haproxy" || res.Bundle.Consistent() != nil {
		t.Fatalf("bundle = %+v", res.Bundle)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name, cfg string
		compile   bool
		want      string
	}{
		{"syntax error names template and line", "line one\n{% if %}\n", true, `template "haproxy.cfg" line 2`},
		{"get_path of a file the target does not render", `{{ "nope.map" | get_path("map") }}`, false, `no such file in the target: map "nope.map"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg, err := target.Compile("edge", config.Target{Base: "/b", HAProxyConfig: tmpl(c.cfg)})
			if !c.compile {
				if err != nil {
					t.Fatal(err)
				}
				_, err = tg.Render(context.Background(), nil, nil)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, engine.ErrTemplate) {
				t.Fatalf("err = %v, want one mentioning %q", err, c.want)
			}
			f := target.Failure(err)
			if f.Template != "haproxy.cfg" || f.Message == "" {
				t.Fatalf("failure = %+v", f)
			}
			var _ *msg.TemplateError = f
		})
	}
}
