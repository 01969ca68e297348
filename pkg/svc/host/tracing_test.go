package host

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
)

// TestRunExportsEachServiceSpans runs two services in one process, each
// making a span as it stops, with the batch held (a schedule delay of ten
// minutes): stopping the process exports both, each under its service's
// own name, with the binary's version.
func TestRunExportsEachServiceSpans(t *testing.T) {
	for _, protocol := range []string{telemetry.ProtocolGRPC, telemetry.ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			ns, err := embedded.Start(embedded.Options{Port: -1, StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
			c := testkit.StartOTLPCollector(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.Endpoint(protocol))
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")

			started := make(chan string, 2)
			lastWords := func(name string) Service {
				return Service{Name: name, Run: func(ctx context.Context, env svc.Env, _ *config.Config) error {
					started <- name
					<-ctx.Done()
					_, sp := env.Tracer.Tracer(name).Start(context.Background(), name+" stopping")
					sp.End()
					return nil
				}}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			s := Settings{NATSURL: ns.ClientURL(), Listen: "127.0.0.1:0", LogLevel: "info", Replicas: 1}
			go func() {
				done <- Run(ctx, s, Binary{Name: "pair", NoConfig: true, Version: "v1.2.3", Services: []Service{lastWords("renderer"), lastWords("deployer")}})
			}()
			for range 2 {
				select {
				case <-started:
				case err := <-done:
					t.Fatalf("Run ended: %v", err)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got := map[string]testkit.OTLPSpan{}
			for _, sp := range c.Spans() {
				got[sp.Name] = sp
			}
			for _, name := range []string{"renderer", "deployer"} {
				sp, ok := got[name+" stopping"]
				switch {
				case !ok:
					t.Errorf("%s's last span was not exported (received %+v)", name, c.Spans())
				case sp.Service != "weft-"+name || sp.Resource["service.version"] != "v1.2.3" || sp.Resource["service.instance.id"] != svc.ReplicaName():
					t.Errorf("%s's span has resource %v, want service.name weft-%s, version v1.2.3, instance %s", name, sp.Resource, name, svc.ReplicaName())
				}
			}
		})
	}
}

// TestRunRefusesBadTracingSettings: a bad OpenTelemetry variable stops
// the process before it connects to anything, naming the variable.
func TestRunRefusesBadTracingSettings(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "udp")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// No server listens there: the error must come before connecting.
	err := Run(ctx, Settings{NATSURL: "nats://127.0.0.1:1", Listen: "127.0.0.1:0", LogLevel: "info"}, Binary{Name: "agent", NoConfig: true})
	if !errors.Is(err, telemetry.ErrSetting) || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Fatalf("err %v, want a bad setting naming OTEL_EXPORTER_OTLP_PROTOCOL", err)
	}
}
