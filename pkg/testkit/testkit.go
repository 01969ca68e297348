// Package testkit is the one shared package of test helpers: an embedded
// NATS server with JetStream and weft's streams provisioned, a service
// environment whose logs go to the test log and whose spans are recorded,
// and polling helpers. It is imported by tests only. Its subpackages hold
// what only some tests need and most should not link: kubetest (a
// Kubernetes control plane), imagetest (containerd and image registries).
package testkit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/svc/health"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// Bus is a running embedded NATS server with a client connection.
type Bus struct {
	Server *server.Server
	NC     *nats.Conn
	JS     jetstream.JetStream
	URL    string
}

// NATS starts an embedded NATS server with JetStream on a random port,
// provisions every weft stream, bucket and store, and stops it all when the
// test ends.
func NATS(t testing.TB) *Bus {
	t.Helper()
	s, err := embedded.Start(embedded.Options{Port: -1, StoreDir: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := msg.Provision(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	return &Bus{Server: s, NC: nc, JS: js, URL: s.ClientURL()}
}

// Env is a service environment for tests.
type Env struct {
	svc.Env
	Registry *prometheus.Registry
	Spans    *tracetest.SpanRecorder
	Logs     *LogBuffer
}

// NewEnv builds an Env on bus whose logs go to the test log (and to Logs)
// and whose spans are recorded.
func NewEnv(t testing.TB, bus *Bus, replica string) *Env {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := tracetest.NewSpanRecorder()
	tp := telemetry.NewTracerProvider()
	tp.RegisterSpanProcessor(rec)
	logs := &LogBuffer{t: t}
	return &Env{
		Env: svc.Env{
			NC: bus.NC, JS: bus.JS,
			Log:      telemetry.NewLogger(logs, slog.LevelDebug),
			Registry: reg, Tracer: tp, Health: health.NewChecks(), Replica: replica,
		},
		Registry: reg, Spans: rec, Logs: logs,
	}
}

// LogBuffer keeps log output for assertions and echoes it to the test log.
type LogBuffer struct {
	t   testing.TB
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if os.Getenv("WEFT_TEST_LOGS") != "" {
		l.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// String returns everything logged so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Eventually polls f until it returns nil or timeout passes, then fails the
// test with f's last error.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Run starts f in a goroutine and returns a stop function that cancels its
// context and waits for it, failing the test if f returned an error.
func Run(t testing.TB, f func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("run returned: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("run did not stop within 15s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// CounterValue sums every sample of the counter, gauge or histogram (its
// sample count) named name in reg.
func CounterValue(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// IgnoredGoroutines are background goroutines of the NATS client that
// outlive a closed connection by a moment; leak checks ignore them.
var IgnoredGoroutines = []string{
	"github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect",
}

// LeakOptions are the goleak options every leak check uses.
func LeakOptions() []goleak.Option {
	opts := make([]goleak.Option, 0, len(IgnoredGoroutines))
	for _, f := range IgnoredGoroutines {
		opts = append(opts, goleak.IgnoreTopFunction(f))
	}
	return opts
}

// LabeledValue is CounterValue over the samples of name whose labels
// include every name, value pair of labels.
func LabeledValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue samples
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
