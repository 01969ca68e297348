package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/config/confdir"
)

func TestConfdTargets(t *testing.T) {
	c, err := config.Load("testdata/confd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := filepath.Abs("testdata")
	if got := strings.Join(c.TargetNames(), ","); got != "app-app,app-sub-cache" {
		t.Fatalf("targets = %s, want app-app,app-sub-cache", got)
	}
	app, cache := c.Targets["app-app"], c.Targets["app-sub-cache"]
	checks := []struct {
		name      string
		got, want any
	}{
		{"resource", app.ConfdResource.File, filepath.Join(dir, "confd", "conf.d", "app.toml")},
		{"dest resolved", app.ConfdResource.Dest, filepath.Join(dir, "out", "app", "app.conf")},
		{"base", app.Base, filepath.Join(dir, "out", "app")},
		{"main", app.MainFile(), "app.conf"},
		{"driver", app.Deploy.Driver, config.DriverFiles},
		{"deploy dest", app.Deploy.Dest, filepath.Join(dir, "out", "app")},
		{"deploy name", app.Deploy.Name, "app-app"},
		{"uid wins over owner", app.Deploy.Owner, "0"},
		{"group", app.Deploy.Group, "daemon"},
		{"mode", app.Deploy.Mode, "0640"},
		{"check_cmd", app.Deploy.CheckCmd, "test -s {{.src}}"},
		{"reload_cmd expanded", app.Deploy.ReloadCmd, "echo reload " + filepath.Join(dir, "out", "app", "app.conf")},
		{"min_reload_interval", app.Deploy.MinReloadInterval.D(), 2 * time.Second},
		{"cmd timeout", app.Deploy.CmdTimeout.D(), 5 * time.Second},
		{"debounce from the resource", app.Render.Debounce.D(), 300 * time.Millisecond},
		{"default debounce", cache.Render.Debounce.D(), config.DefaultDebounce},
		{"kinds", strings.Join(app.Validate.Kinds, ","), config.KindTemplate},
		{"validate copied", app.Validate.Timeout.D(), 3 * time.Second},
		{"drift check copied", cache.Deploy.DriftCheck.D(), time.Minute},
		{"instance", cache.Deploy.Instance, config.DefaultInstance},
		{"no mode", cache.Deploy.Mode, ""},
		{"absolute dest", cache.Base, "/etc/app"},
		{"cache main", cache.MainFile(), "cache.json"},
		{"output format", cache.ConfdResource.OutputFormat, "json"},
		{"selects", app.ConfdResource.Selects("/myapp/database/url"), true},
		{"does not select", app.ConfdResource.Selects("/cache/size"), false},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}

func TestConfdTargetErrors(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		files map[string]string
		is    error
		text  []string
	}{
		{
			name: "bad toml",
			yaml: "targets:\n  app:\n    confd: {dir: cd}\n",
			files: map[string]string{
				"cd/conf.d/a.toml":    "[template]\nsrc = \"a.tmpl\"\ndest = \"/x/a\"\nmode = 0644\n",
				"cd/templates/a.tmpl": "a",
			},
			is:   confdir.ErrConfig,
			text: []string{"targets.app.confd", filepath.Join("cd", "conf.d", "a.toml") + ":4: mode:"},
		},
		{
			name:  "missing template",
			yaml:  "targets:\n  app:\n    confd: {dir: cd}\n",
			files: map[string]string{"cd/conf.d/a.toml": "[template]\nsrc = \"a.tmpl\"\ndest = \"/x/a\"\n"},
			is:    os.ErrNotExist,
			text:  []string{"a.toml: src: missing template"},
		},
		{
			name: "templates beside the confdir",
			yaml: "targets:\n  app:\n    confd: {dir: cd}\n    haproxy_config: {template: x}\n",
			files: map[string]string{
				"cd/conf.d/a.toml":    "[template]\nsrc = \"a.tmpl\"\ndest = \"/x/a\"\n",
				"cd/templates/a.tmpl": "a",
			},
			is:   config.ErrInvalid,
			text: []string{"targets.app: a confd target takes its templates from the confdir"},
		},
		{
			name: "two resources, one dest",
			yaml: "targets:\n  app:\n    confd: {dir: cd}\n",
			files: map[string]string{
				"cd/conf.d/a.toml":    "[template]\nsrc = \"a.tmpl\"\ndest = \"/x/a\"\n",
				"cd/conf.d/b.toml":    "[template]\nsrc = \"a.tmpl\"\ndest = \"/x/a\"\n",
				"cd/templates/a.tmpl": "a",
			},
			is:   config.ErrInvalid,
			text: []string{"both write /x/a"},
		},
		{
			name:  "empty confdir",
			yaml:  "targets:\n  app:\n    confd: {dir: cd}\n",
			files: map[string]string{"cd/conf.d/README": "nothing"},
			is:    config.ErrInvalid,
			text:  []string{"has no template resources"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := config.Parse([]byte(tc.yaml), dir)
			if !errors.Is(err, tc.is) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want %v and ErrInvalid", err, tc.is)
			}
			for _, s := range tc.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestConfdTargetName(t *testing.T) {
	tests := []struct{ target, file, want string }{
		{"app", "/c/conf.d/a.toml", "app-a"},
		{"app", "/c/conf.d/sub/nested.toml", "app-sub-nested"},
		{"app", "/c/conf.d/my.app.conf.toml", "app-my-app-conf"},
		{"app", "/c/conf.d/plaintoml", "app-plaintoml"},
	}
	for _, tc := range tests {
		if got := config.ConfdTargetName(tc.target, "/c/conf.d", tc.file); got != tc.want {
			t.Errorf("ConfdTargetName(%q, %q) = %q, want %q", tc.target, tc.file, got, tc.want)
		}
	}
}
