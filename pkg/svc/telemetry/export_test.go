package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
)

// otelVars are every variable these tests set; each test starts with none
// of them set, whatever the environment running the tests holds.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TIMEOUT",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_SCHEDULE_DELAY",
}

func clearEnv(t *testing.T, set map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
	for k, v := range set {
		t.Setenv(k, v)
	}
}

func newTracing(t *testing.T) *telemetry.Tracing {
	t.Helper()
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingOptions{Version: "v9.9.9", Instance: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

// TestTracingExportsOnShutdown exports through each protocol to a real
// OTLP receiver: the batch is held (a schedule delay of ten minutes) and
// Shutdown sends it; each service's spans carry its own resource, and a
// span parented on another service's keeps its parent.
func TestTracingExportsOnShutdown(t *testing.T) {
	for _, protocol := range []string{telemetry.ProtocolGRPC, telemetry.ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			c := testkit.StartOTLPCollector(t)
			clearEnv(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": c.Endpoint(protocol),
				"OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
				"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=test",
				"OTEL_BSP_SCHEDULE_DELAY":     "600000",
			})
			tr := newTracing(t)
			if on, p, ep := tr.Exporting(); !on || p != protocol || ep != c.Endpoint(protocol) {
				t.Fatalf("Exporting() = %v, %q, %q", on, p, ep)
			}
			ctx, parent := tr.Provider("renderer").Tracer("renderer").Start(context.Background(), "render edge")
			_, child := tr.Provider("deployer").Tracer("deployer").Start(ctx, "deployer orders")
			child.End()
			parent.End()
			if n := c.Requests(); n != 0 {
				t.Fatalf("%d export requests before Shutdown: the batch was not held", n)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(tr.Metrics()...)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, service := range []string{"renderer", "deployer"} {
				if n := testkit.LabeledValue(t, reg, "weft_tracing_spans_exported_total", map[string]string{"service": service}); n != 1 {
					t.Errorf("%s: %v spans counted exported, want 1", service, n)
				}
			}
			got := map[string]testkit.OTLPSpan{}
			for _, s := range c.Spans() {
				got[s.Name] = s
			}
			r, d := got["render edge"], got["deployer orders"]
			checks := []struct{ what, got, want string }{
				{"render's service.name", r.Service, "weft-renderer"},
				{"deploy's service.name", d.Service, "weft-deployer"},
				{"service.version", d.Resource["service.version"], "v9.9.9"},
				{"service.instance.id", r.Resource["service.instance.id"], "host-1"},
				{"OTEL_RESOURCE_ATTRIBUTES", r.Resource["deployment.environment"], "test"},
				{"deploy's trace", d.TraceID, parent.SpanContext().TraceID().String()},
				{"deploy's parent", d.ParentID, parent.SpanContext().SpanID().String()},
				{"render is a root", r.ParentID, ""},
				{"protocol", r.Protocol, protocol},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s: got %q, want %q (received %+v)", ch.what, ch.got, ch.want, c.Spans())
				}
			}
		})
	}
}

// TestTracingResourceFromEnvironment: OTEL_SERVICE_NAME names every
// service's spans, over weft's names.
func TestTracingResourceFromEnvironment(t *testing.T) {
	c := testkit.StartOTLPCollector(t)
	clearEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": c.Endpoint(telemetry.ProtocolHTTP),
		"OTEL_SERVICE_NAME":           "edge-weft",
		"OTEL_RESOURCE_ATTRIBUTES":    "service.name=ignored,team=net",
	})
	tr := newTracing(t)
	_, sp := tr.Provider("watcher").Tracer("watcher").Start(context.Background(), "watcher apply")
	sp.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := c.Spans()
	if len(spans) != 1 || spans[0].Service != "edge-weft" || spans[0].Resource["team"] != "net" {
		t.Fatalf("received %+v, want one span of service edge-weft with team=net", spans)
	}
}

// TestTracingOff: without a variable asking for export, or with the
// exporter none, nothing is sent, and spans still get ids.
func TestTracingOff(t *testing.T) {
	cases := []struct {
		name string
		env  func(c *testkit.OTLPCollector) map[string]string
	}{
		{"no variable", func(*testkit.OTLPCollector) map[string]string { return nil }},
		{"protocol alone", func(*testkit.OTLPCollector) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
		}},
		{"exporter none", func(c *testkit.OTLPCollector) map[string]string {
			return map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": c.Endpoint(telemetry.ProtocolHTTP)}
		}},
		{"SDK disabled", func(c *testkit.OTLPCollector) map[string]string {
			return map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": c.Endpoint(telemetry.ProtocolHTTP)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testkit.StartOTLPCollector(t)
			clearEnv(t, tc.env(c))
			tr := newTracing(t)
			if on, _, _ := tr.Exporting(); on {
				t.Error("Exporting() is true")
			}
			_, sp := tr.Provider("renderer").Tracer("renderer").Start(context.Background(), "render edge")
			sp.End()
			if !sp.SpanContext().IsValid() {
				t.Error("the span has no ids")
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := c.Requests(); n != 0 {
				t.Errorf("the collector received %d requests", n)
			}
		})
	}
}

// TestTracingRefusesBadSettings: a value the exporters would ignore with
// a log line of their own is an error naming the variable.
func TestTracingRefusesBadSettings(t *testing.T) {
	cases := []struct{ name, value, want string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "udp", "want one of grpc, http/protobuf"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "want one of grpc, http/protobuf"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317", "want a URL"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1", "not a URL"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector:4318", "want a URL"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "api-key", "is not key=value"},
		{"OTEL_EXPORTER_OTLP_INSECURE", "yes", "want true or false"},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "whole number"},
		{"OTEL_TRACES_EXPORTER", "zipkin", `exporter "zipkin"`},
		{"OTEL_TRACES_SAMPLER", "sometimes", "want one of"},
		{"OTEL_TRACES_SAMPLER_ARG", "1.5", "from 0 to 1"},
		{"OTEL_BSP_SCHEDULE_DELAY", "-1", "whole number"},
		{"OTEL_RESOURCE_ATTRIBUTES", "team", "OTEL_RESOURCE_ATTRIBUTES"},
	}
	for _, tc := range cases {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			clearEnv(t, map[string]string{tc.name: tc.value})
			tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingOptions{})
			if err == nil {
				_ = tr.Shutdown(context.Background())
				t.Fatal("no error")
			}
			if !errors.Is(err, telemetry.ErrSetting) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want ErrSetting naming %s and saying %q", err, tc.name, tc.want)
			}
		})
	}
}

// TestTracingSurvivesAnUnreachableCollector: with the collector down,
// spans are made without waiting and the export errors are logged; once
// it is up, spans made then arrive.
func TestTracingSurvivesAnUnreachableCollector(t *testing.T) {
	for _, protocol := range []string{telemetry.ProtocolGRPC, telemetry.ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			c := testkit.NewOTLPCollector(t)
			clearEnv(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": c.Endpoint(protocol),
				"OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
				"OTEL_EXPORTER_OTLP_TIMEOUT":  "1000",
				"OTEL_BSP_SCHEDULE_DELAY":     "50",
			})
			logs := &testkit.SyncBuffer{}
			otel.SetErrorHandler(telemetry.ErrorLog(telemetry.NewLogger(logs, slog.LevelInfo), time.Hour))
			t.Cleanup(func() { otel.SetErrorHandler(telemetry.ErrorLog(slog.New(slog.DiscardHandler), time.Hour)) })
			tr := newTracing(t)
			reg := prometheus.NewRegistry()
			reg.MustRegister(tr.Metrics()...)
			tracer := tr.Provider("renderer").Tracer("renderer")
			// More spans than the batch queue holds: the surplus is
			// dropped, nothing waits for the collector.
			for i := range 5000 {
				_, sp := tracer.Start(context.Background(), fmt.Sprintf("early %d", i))
				sp.End()
			}
			testkit.Eventually(t, time.Minute, func() error {
				if !strings.Contains(logs.String(), "tracing: OpenTelemetry error") {
					return errors.New("no export error logged yet")
				}
				return nil
			})
			testkit.Eventually(t, time.Minute, func() error {
				if n := testkit.LabeledValue(t, reg, "weft_tracing_spans_failed_total", map[string]string{"service": "renderer"}); n == 0 {
					return errors.New("no span counted failed yet")
				}
				return nil
			})
			c.Start()
			var late trace.Span
			testkit.Eventually(t, 2*time.Minute, func() error {
				// A span now and then: the first after the exporter's
				// retries of the early batches gave up may be the one that
				// goes.
				if late == nil || len(c.Trace(late.SpanContext().TraceID().String())) == 0 {
					_, late = tracer.Start(context.Background(), "late")
					late.End()
					return errors.New("no span made after the collector came up has arrived")
				}
				return nil
			})
			if n := strings.Count(logs.String(), "tracing: OpenTelemetry error"); n != 1 {
				t.Errorf("%d export errors logged within the hour, want 1:\n%s", n, logs)
			}
		})
	}
}

// TestErrorLogIsRateLimited: the first error is logged at once, the next
// within the interval only counted, and the first after it says how many
// were left out.
func TestErrorLogIsRateLimited(t *testing.T) {
	logs := &testkit.SyncBuffer{}
	h := telemetry.ErrorLog(telemetry.NewLogger(logs, slog.LevelInfo), time.Second)
	h.Handle(errors.New("one"))
	h.Handle(errors.New("two"))
	h.Handle(errors.New("three"))
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Fatalf("%d records for three errors at once, want 1:\n%s", n, logs)
	}
	time.Sleep(1100 * time.Millisecond)
	h.Handle(errors.New("four"))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"err":"four"`) || !strings.Contains(lines[1], `"left_out":2`) {
		t.Fatalf("after the interval: %q, want a record of four leaving out 2", lines)
	}
}
