package config_test

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// seedExample is the design seed's "Configuration Example", verbatim.
const seedExample = "../../examples/seed/weft.yaml"

// TestLoadSeedExample: the seed's configuration loads as written, with the
// source and target it implies and its own sections kept.
func TestLoadSeedExample(t *testing.T) {
	t.Setenv(config.SeedUserEnv, "admin")
	t.Setenv(config.SeedPasswordEnv, "s3cret")
	c, err := config.Load(seedExample)
	if err != nil {
		t.Fatal(err)
	}
	tg, ok := c.Targets[config.SeedTarget]
	if !ok {
		t.Fatalf("no target %q: %v", config.SeedTarget, c.TargetNames())
	}
	pods := c.WatchedResources[config.SeedPodsType]
	healthz, metrics, err := c.ListenAddrs("127.0.0.1:9090")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"one kubernetes source", c.Sources, []config.Source{{Name: config.SeedSource, Type: config.SourceKubernetes, Rescan: config.Duration(config.DefaultRescan), Resync: config.Duration(config.DefaultResync)}}},
		{"types", strings.Join(c.ResourceTypes(), ","), "endpoints,haproxy-pods,ingresses,secrets,services"},
		{"pods watched", [3]string{pods.APIVersion, pods.Kind, pods.LabelSelector}, [3]string{"v1", "Pod", "app=haproxy,component=loadbalancer"}},
		{"pods kept in full", pods.Store, config.StoreFull},
		{"driver", tg.Deploy.Driver, config.DriverDataplane},
		{"pods instances", *tg.Deploy.Pods, config.Pods{Type: config.SeedPodsType, LabelSelector: "app=haproxy,component=loadbalancer", Port: 5555, Scheme: "http"}},
		{"credentials from the environment", [2]string{tg.Deploy.Dataplane.User, tg.Deploy.Dataplane.Password}, [2]string{"admin", "s3cret"}},
		{"base", tg.Base, "/etc/haproxy"},
		{"snippets", len(tg.TemplateSnippets), 5},
		{"maps", len(tg.Maps), 4},
		{"files", len(tg.Files), 7},
		{"config template", strings.HasPrefix(tg.HAProxyConfig.Template, "global\n"), true},
		{"webhook types", c.WebhookTypes(), []string{"ingresses", "secrets"}},
		{"ignore fields", c.WatchedResourcesIgnoreFields, []string{"metadata.managedFields"}},
		{"healthz port", healthz, "127.0.0.1:8080"},
		{"metrics port", metrics, "127.0.0.1:9090"},
		{"verbose 2 is debug", c.Logging.Level(), slog.LevelDebug},
		{"validation kept", *c.Validation, config.SeedValidation{DataplaneHost: "localhost", DataplanePort: 5555}},
		{"notes", c.SeedNotes(), []string{"validation.dataplane_host/dataplane_port (localhost:5555) are not used: weft validates every bundle with haproxy -c itself"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

// TestSeedWithoutCredentials: without the credentials the seed form still
// loads (weft render needs none), and says what deploys will lack.
func TestSeedWithoutCredentials(t *testing.T) {
	t.Setenv(config.SeedUserEnv, "")
	c, err := config.Load(seedExample)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(c.SeedNotes(), "\n")
	if !strings.Contains(notes, config.SeedUserEnv+" is not set") {
		t.Errorf("notes do not name the missing user:\n%s", notes)
	}
}

func TestLoggingLevel(t *testing.T) {
	v := func(n int) *config.Logging { return &config.Logging{Verbose: &n} }
	for _, tc := range []struct {
		l    *config.Logging
		want slog.Level
	}{
		{nil, slog.LevelInfo},
		{&config.Logging{}, slog.LevelInfo},
		{v(0), slog.LevelWarn},
		{v(1), slog.LevelInfo},
		{v(2), slog.LevelDebug},
	} {
		if got := tc.l.Level(); got != tc.want {
			t.Errorf("%+v: got %v, want %v", tc.l, got, tc.want)
		}
	}
}
