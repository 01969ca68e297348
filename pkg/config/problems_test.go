package config_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

var update = flag.Bool("update", false, "rewrite the .errors golden files")

// TestProblemsGolden loads every testdata/errors/*.yaml (and testdata/bad.yaml)
// and compares the whole error text with the .errors file beside it: each
// problem on its own line, in file order, as file:line:column: field path:
// message.
func TestProblemsGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden configurations: %v", err)
	}
	files = append(files, "testdata/bad.yaml")
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			_, err := config.Load(file)
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			var ps config.Problems
			if !errors.As(err, &ps) || len(ps) != strings.Count(err.Error(), "\n")+1 {
				t.Fatalf("got %T with %d problems, want config.Problems, one a line:\n%v", err, len(ps), err)
			}
			for _, p := range ps {
				if p.File != file || (p.Line == 0 && p.Path != "") {
					t.Errorf("problem without its place: %+v", *p)
				}
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".errors"
			got := err.Error() + "\n"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("errors of %s:\n%s\nwant (%s):\n%s", file, got, golden, want)
			}
		})
	}
}

// TestSuggestions checks the closest known field is suggested for a
// misspelled one at any depth, and that far-off names list the known ones.
func TestSuggestions(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"targetz: {}", `weft.yaml:1:1: targetz: unknown field "targetz"; did you mean "targets"?`},
		{"Sources: []", `weft.yaml:1:1: Sources: unknown field "Sources"; did you mean "sources"?`},
		{"sources: [{name: m, type: manifests, pth: x}]", `weft.yaml:1:38: sources[0].pth: unknown field "pth"; did you mean "path"?`},
		{"targets: {t: {haproxy_cfg: {template: x}}}", `weft.yaml:1:15: targets.t.haproxy_cfg: unknown field "haproxy_cfg"; did you mean "haproxy_config"?`},
		{"targets: {t: {deploy: {reload_cmnd: x}}}", `weft.yaml:1:24: targets.t.deploy.reload_cmnd: unknown field "reload_cmnd"; did you mean "reload_cmd"?`},
		{"watched_resources: {s: {apiVersion: v1}}", `weft.yaml:1:25: watched_resources.s.apiVersion: unknown field "apiVersion"; did you mean "api_version"?`},
		{"colour: blue", `weft.yaml:1:1: colour: unknown field "colour" (known: controller, files, haproxy_config, history, hub_domain, logging, maps, pod_selector, puller, sites, sources, targets, template_snippets, validation, validation_webhook, watched_resources, watched_resources_ignore_fields)`},
	}
	for _, tc := range cases {
		_, err := config.Parse([]byte(tc.yaml), "/tmp")
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s:\ngot  %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}
