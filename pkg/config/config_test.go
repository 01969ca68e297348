package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
)

func TestLoadGood(t *testing.T) {
	c, err := config.Load("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := filepath.Abs("testdata")
	tg := c.Targets["edge"]
	checks := []struct {
		name      string
		got, want any
	}{
		{"source path resolved", c.Sources[0].Path, filepath.Join(dir, "manifests")},
		{"default rescan", c.Sources[0].Rescan.D(), config.DefaultRescan},
		{"default ignore fields", c.WatchedResourcesIgnoreFields, []string{"metadata.managedFields"}},
		{"dest resolved", tg.Deploy.Dest, filepath.Join(dir, "out")},
		{"base defaults to dest", tg.Base, filepath.Join(dir, "out")},
		{"default instance", tg.Deploy.Instance, config.DefaultInstance},
		{"debounce", tg.Render.Debounce.D(), 250 * time.Millisecond},
		{"leading edge off", tg.Render.LeadingEdge(), false},
		{"default kinds", strings.Join(tg.Validate.Kinds, ","), "haproxy,template"},
		{"targets", strings.Join(c.TargetNames(), ","), "edge"},
		{"types", strings.Join(c.ResourceTypes(), ","), "endpoints,ingresses"},
		{"ignore paths", len(c.IgnorePaths()), 1},
		{"default webhook timeout", c.ValidationWebhook.Timeout.D(), config.DefaultWebhookTimeout},
		{"default webhook failure policy", c.ValidationWebhook.FailurePolicy, config.FailurePolicyFail},
		{"webhook refuses what it cannot decide", c.ValidationWebhook.Admits(), false},
		{"no webhook types", len(c.WebhookTypes()), 0},
	}
	for _, ck := range checks {
		if !equal(ck.got, ck.want) {
			t.Errorf("%s: got %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	if m, err := tg.Deploy.FileMode(); err != nil || m != 0o640 {
		t.Errorf("mode = %o, %v", m, err)
	}
	if typ, ok := c.TypeFor("discovery.k8s.io/v1", "EndpointSlice"); !ok || typ != "endpoints" {
		t.Errorf("TypeFor = %q %v", typ, ok)
	}
	if _, ok := c.TypeFor("v1", "Pod"); ok {
		t.Error("TypeFor found an unwatched kind")
	}
}

func equal(a, b any) bool {
	as, aok := a.([]string)
	bs, bok := b.([]string)
	if aok && bok {
		return strings.Join(as, "\x00") == strings.Join(bs, "\x00")
	}
	return a == b
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown field", "targetz: {}", "unknown field"},
		{"empty", "", "weft.yaml: the configuration is empty"},
		{"only comments", "# soon\n\n  # really\n", "weft.yaml: the configuration is empty"},
		{"null", "~\n", "weft.yaml: the configuration is empty"},
		{"bad duration", "sources: [{name: m, type: manifests, path: x, rescan: soon}]", "soon"},
		{"not yaml", "sources: [", "yaml"},
		{"poll of an object source", "sources: [{name: m, type: manifests, path: x, poll: true}]", "sources[0].poll: only key-value sources poll"},
		{"duplicate source", "sources: [{name: m, type: manifests, path: a}, {name: m, type: manifests, path: b}]", `"m" is used twice`},
		{"unknown expect", "targets: {t: {validate: {expect: gossip}, haproxy_config: {template: x}, deploy: {driver: files, dest: /o}}}", "targets.t.validate.expect"},
		{"min kinds above kinds", "targets: {t: {validate: {kinds: [haproxy], min_kinds: 2}, haproxy_config: {template: x}, deploy: {driver: files, dest: /o}}}", "targets.t.validate.min_kinds"},
		{"instance without name", "targets: {t: {haproxy_config: {template: x}, deploy: {driver: files, dest: /o, instances: [{dest: /a}]}}}", "targets.t.deploy.instances[0].name"},
		{"instances share a dest", "targets: {t: {haproxy_config: {template: x}, deploy: {driver: files, dest: /o, instances: [{name: a}, {name: b}]}}}", "targets.t.deploy.instances[1].dest: /o is also the dest of instance a"},
		{"instance without master socket", "targets: {t: {haproxy_config: {template: x}, deploy: {driver: runtime, instances: [{name: a, dest: /a}]}}}", "targets.t.deploy.instances[0].master_socket"},
		{"dataplane without url", "targets: {t: {base: /b, haproxy_config: {template: x}, deploy: {driver: dataplane, dataplane: {user: u}}}}", "weft.yaml:1:84: targets.t.deploy.dataplane.url: required for the dataplane driver"},
		{"pods of an unwatched type", "targets: {t: {base: /b, haproxy_config: {template: x}, deploy: {driver: dataplane, dataplane: {user: u}, pods: {type: pods}}}}", `targets.t.deploy.pods.type: "pods" is not a watched resource type`},
		{"pods of another kind", "watched_resources: {pods: {api_version: v1, kind: Service}}\ntargets: {t: {base: /b, haproxy_config: {template: x}, deploy: {driver: dataplane, dataplane: {user: u}, pods: {type: pods}}}}", `targets.t.deploy.pods.type: "pods" is v1 Service, not Pods`},
		{"pods on demand", "watched_resources: {pods: {api_version: v1, kind: Pod, store: on-demand}}\ntargets: {t: {base: /b, haproxy_config: {template: x}, deploy: {driver: dataplane, dataplane: {user: u}, pods: {type: pods}}}}", `targets.t.deploy.pods.type: "pods" is kept on demand`},
		{"pods with a bad label selector", "watched_resources: {pods: {api_version: v1, kind: Pod}}\ntargets: {t: {base: /b, haproxy_config: {template: x}, deploy: {driver: dataplane, dataplane: {user: u}, pods: {type: pods, label_selector: \"app in (a\"}}}}", "targets.t.deploy.pods.label_selector"},
		{"a bad label selector", "watched_resources: {svc: {api_version: v1, kind: Service, label_selector: \"a==b==c\"}}", "watched_resources.svc.label_selector"},
		{"a bad field selector", "watched_resources: {svc: {api_version: v1, kind: Service, field_selector: \"metadata.name\"}}", "watched_resources.svc.field_selector"},
		{"pods with the files driver", "targets: {t: {haproxy_config: {template: x}, deploy: {driver: files, dest: /o, pods: {type: pods}}}}", "pods are instances of the dataplane driver"},
		{"negative drift check", "targets: {t: {haproxy_config: {template: x}, deploy: {driver: files, dest: /o, drift_check: -1s}}}", "drift_check"},
		{"max wait under debounce", "targets: {t: {render: {debounce: 1s, max_wait: 100ms}, haproxy_config: {template: x}, deploy: {driver: files, dest: /o}}}", "targets.t.render.max_wait"},
		{"relative base", "targets: {t: {base: rel, haproxy_config: {template: x}, deploy: {driver: files, dest: /o}}}", "must be an absolute path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml), "/tmp")
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestQuickstartLoads(t *testing.T) {
	if _, err := config.Load("../../examples/quickstart/weft.yaml"); err != nil {
		t.Fatal(err)
	}
}

// TestRenderDebounce: an unset debounce is the default; 0 stays 0 (render
// as soon as the previous render is done) rather than becoming the default.
// An unset max_wait bounds a never-pausing stream of changes by the
// debounce itself.
func TestRenderDebounce(t *testing.T) {
	const base = `
sources: [{name: m, type: manifests, path: unused}]
watched_resources:
  services: {api_version: v1, kind: Service}
targets:
  edge:
    base: /etc/haproxy
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "global"}
`
	tests := []struct {
		name, render string
		want, bound  time.Duration
	}{
		{"unset", "", config.DefaultDebounce, config.DefaultDebounce},
		{"zero", "    render: {debounce: 0s}\n", 0, 0},
		{"set", "    render: {debounce: 20ms}\n", 20 * time.Millisecond, 20 * time.Millisecond},
		{"max_wait set", "    render: {debounce: 20ms, max_wait: 1s}\n", 20 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(base+tt.render), "/")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Targets["edge"].Render.Wait(); got != tt.want {
				t.Errorf("Wait() = %s, want %s", got, tt.want)
			}
			if got := c.Targets["edge"].Render.Bound(); got != tt.bound {
				t.Errorf("Bound() = %s, want %s", got, tt.bound)
			}
		})
	}
}
