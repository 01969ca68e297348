package host

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/testkit"
)

// TestApplyFilePrecedence: the file's logging.verbose and controller
// ports apply only where neither a flag nor a WEFT_* variable gave the
// setting (flags over environment over file over defaults).
func TestApplyFilePrecedence(t *testing.T) {
	verbose := 0
	cfg := &config.Config{Logging: &config.Logging{Verbose: &verbose}, Controller: &config.Controller{HealthzPort: 8080, MetricsPort: 9191}}
	for _, tc := range []struct {
		name          string
		args          []string
		env           map[string]string
		level, listen string
		metricsListen string
	}{
		{"file over defaults", nil, nil, "warn", "127.0.0.1:8080", "127.0.0.1:9191"},
		{"flags over file", []string{"--log-level", "error", "--listen", "0.0.0.0:7000"}, nil, "error", "0.0.0.0:7000", ""},
		{"environment over file", nil, map[string]string{"WEFT_LOG_LEVEL": "debug", "WEFT_LISTEN": "127.0.0.2:7001"}, "debug", "127.0.0.2:7001", ""},
		{"flags over environment", []string{"--log-level", "info"}, map[string]string{"WEFT_LOG_LEVEL": "debug"}, "info", "127.0.0.1:8080", "127.0.0.1:9191"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, env := range fileSettings {
				if v, ok := tc.env[env]; ok {
					t.Setenv(env, v)
				} else {
					t.Setenv(env, "")
					_ = os.Unsetenv(env)
				}
			}
			var s Settings
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			s.Flags(fs, true)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			s.Given(fs)
			if err := s.applyFile(cfg); err != nil {
				t.Fatal(err)
			}
			if s.LogLevel != tc.level || s.Listen != tc.listen || s.MetricsListen != tc.metricsListen {
				t.Errorf("log level %q listen %q metrics %q, want %q %q %q", s.LogLevel, s.Listen, s.MetricsListen, tc.level, tc.listen, tc.metricsListen)
			}
		})
	}
}

// TestRunServesControllerPorts: a configuration whose controller section
// gives /healthz and /metrics ports of their own gets /healthz and /readyz
// served on the one and /metrics on the other, each only there; with
// --pprof, Go's profiles are served beside /metrics.
func TestRunServesControllerPorts(t *testing.T) {
	ns, err := embedded.Start(embedded.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	healthz, metrics := freeTCPPort(t), freeTCPPort(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`controller:
  healthz_port: %d
  metrics_port: %d
logging:
  verbose: 2
sources:
  - {name: m, type: manifests, path: manifests}
watched_resources:
  services: {api_version: v1, kind: Service}
targets:
  edge:
    haproxy_config: {template: "global\n"}
    deploy: {driver: files, dest: out}
`, healthz, metrics)
	cfgPath := filepath.Join(dir, "weft.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var s Settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.Flags(fs, true)
	for _, env := range fileSettings {
		t.Setenv(env, "")
		_ = os.Unsetenv(env)
	}
	if err := fs.Parse([]string{"--config", cfgPath, "--nats-url", ns.ClientURL(), "--watch-config=false", "--pprof"}); err != nil {
		t.Fatal(err)
	}
	s.Given(fs)
	started := make(chan struct{}, 1)
	run := func(ctx context.Context, env svc.Env, cfg *config.Config) error {
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, Binary{Name: "t", Services: []Service{{Name: "s", Run: run}}}) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the service did not start")
	}
	at := func(port int, p string) string { return "http://127.0.0.1:" + strconv.Itoa(port) + p }
	for _, want := range []struct {
		url string
		ok  bool
	}{
		{at(healthz, "/healthz"), true},
		{at(healthz, "/readyz"), true},
		{at(metrics, "/metrics"), true},
		{at(healthz, "/metrics"), false},
		{at(metrics, "/healthz"), false},
		{at(metrics, "/debug/pprof/heap"), true},
		{at(metrics, "/debug/pprof/goroutine"), true},
		{at(healthz, "/debug/pprof/heap"), false},
	} {
		deadline := time.Now().Add(time.Minute)
		for {
			err := testkit.Healthy(http.DefaultClient, want.url)
			if (err == nil) == want.ok && (want.ok || strings.Contains(err.Error(), "404")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, want ok %v", want.url, err, want.ok)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop")
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
