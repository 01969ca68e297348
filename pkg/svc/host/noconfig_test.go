package host

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/testkit"
)

// TestRunWithoutConfig: a NoConfig binary takes only the connection
// settings (no --config), reads no weft.yaml (there is none), connects,
// provisions, serves /readyz and /metrics with its services' own checks,
// runs its services once with no configuration, and stops with ctx.
func TestRunWithoutConfig(t *testing.T) {
	ns, err := embedded.Start(embedded.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	_ = l.Close()

	var s Settings
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	s.ConnectionFlags(fs)
	for _, absent := range []string{"config", "nats-listen", "data-dir", "config-map", "watch-config", "kubeconfig"} {
		if fs.Lookup(absent) != nil {
			t.Errorf("a binary without weft.yaml takes --%s", absent)
		}
	}
	if err := fs.Parse([]string{"--nats-url", ns.ClientURL(), "--listen", listen}); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // no weft.yaml here

	started := make(chan *config.Config, 1)
	run := func(ctx context.Context, env svc.Env, cfg *config.Config) error {
		if _, err := env.JS.Stream(ctx, msg.StreamPulls); err != nil {
			return fmt.Errorf("not provisioned: %w", err)
		}
		env.Health.Func("own", func() error { return nil })
		started <- cfg
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, s, Binary{Name: "agent", NoConfig: true, Connection: "agent n1", Services: []Service{{Name: "s", Run: run}}})
	}()
	select {
	case cfg := <-started:
		if cfg != nil {
			t.Fatalf("the service got a configuration: %+v", cfg)
		}
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the service did not start")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := testkit.Healthy(http.DefaultClient, "http://"+listen+"/readyz")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := testkit.Healthy(http.DefaultClient, "http://"+listen+"/metrics"); err != nil {
		t.Fatal(err)
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

// TestRunWithoutConfigNeedsAServer: without --nats-url there is nothing
// to connect to, and Run says so.
func TestRunWithoutConfigNeedsAServer(t *testing.T) {
	err := Run(context.Background(), Settings{LogLevel: "info"}, Binary{Name: "agent", NoConfig: true})
	if err == nil || !strings.Contains(err.Error(), "--nats-url") {
		t.Fatalf("err %v, want one naming --nats-url", err)
	}
}
