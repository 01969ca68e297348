package target_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/confd"
	"github.com/weftio/weft/pkg/render/target"
)

// confdTarget loads a weft.yaml with one confd target over a confdir of
// one resource whose template is tmpl, and returns the target it became.
func confdTarget(t *testing.T, tmpl string) (string, config.Target) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"cd/conf.d/app.toml":    "[template]\nsrc = \"app.tmpl\"\ndest = \"/etc/app/app.conf\"\nprefix = \"/app\"\nkeys = [\"/db\"]\n",
		"cd/templates/app.tmpl": tmpl,
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := config.Parse([]byte("targets:\n  web:\n    confd: {dir: cd, prefix: /prod}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	return "web-app", c.Targets["web-app"]
}

func TestConfdTarget(t *testing.T) {
	name, tc := confdTarget(t, "url={{getv \"/db/url\"}} port={{getv \"/db/port\" \"5432\"}}\n")
	tg, err := target.Compile(name, tc)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{"/prod/app/db/url": "db.local", "/prod/app/dbx": "no", "/other": "no", "plain": 1}
	res, err := tg.Render(context.Background(), nil, values)
	if err != nil {
		t.Fatal(err)
	}
	b := res.Bundle
	if b.Base != "/etc/app" || b.Main != "app.conf" || len(b.Files) != 1 || b.Files[0].Path != "app.conf" {
		t.Fatalf("bundle = base %q main %q files %+v", b.Base, b.Main, b.Files)
	}
	if got, want := string(b.Files[0].Content), "url=db.local port=5432\n"; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	if strings.Join(res.ValuesRead, ",") != "/prod/app/db/url" {
		t.Errorf("ValuesRead = %v", res.ValuesRead)
	}
	sel := tg.Selects()
	for name, want := range map[string]bool{"/prod/app/db": true, "/prod/app/db/port": true, "/prod/app/dbx": false, "/app/db/url": false} {
		if sel(name) != want {
			t.Errorf("Selects(%q) = %v, want %v", name, !want, want)
		}
	}
}

func TestConfdTargetFailures(t *testing.T) {
	tests := []struct {
		name, tmpl string
		compile    bool // fails at Compile, else at Render
		line       int
	}{
		{"unknown function", "a\n{{nope}}\n", true, 2},
		{"missing key", "a\nb\n{{getv \"/db/url\"}}\n", false, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, cfg := confdTarget(t, tc.tmpl)
			tg, err := target.Compile(name, cfg)
			if err == nil {
				_, err = tg.Render(context.Background(), nil, map[string]any{})
			} else if !tc.compile {
				t.Fatalf("Compile: %v", err)
			}
			if !errors.Is(err, confd.ErrTemplate) {
				t.Fatalf("err = %v, want a template error", err)
			}
			f := target.Failure(err)
			if filepath.Base(f.Template) != "app.tmpl" || f.Line != tc.line || !strings.Contains(f.Message, "app.tmpl") {
				t.Errorf("Failure = %+v, want app.tmpl line %d", f, tc.line)
			}
		})
	}
}
