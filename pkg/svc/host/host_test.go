package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/health"
)

// TestRunServicesRestartsOnNewConfiguration feeds three configurations: the
// services run on each in turn, the previous generation stopped first.
func TestRunServicesRestartsOnNewConfiguration(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	svcs := []Service{{Name: "s", Run: func(ctx context.Context, _ svc.Env, cfg *config.Config) error {
		record("start " + cfg.Hash)
		<-ctx.Done()
		record("stop " + cfg.Hash)
		return nil
	}}}
	env := svc.Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: health.NewChecks()}
	configs := make(chan *config.Config)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServices(ctx, env, nil, svcs, configs) }()
	for _, h := range []string{"a", "b", "c"} {
		configs <- &config.Config{Hash: h}
	}
	waitEvents := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := len(events)
			mu.Unlock()
			if got >= n || time.Now().After(deadline) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitEvents(5)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []string{"start a", "stop a", "start b", "stop b", "start c", "stop c"}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != len(want) {
		t.Fatalf("events = %v, want %v", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("events = %v, want %v", events, want)
		}
	}
}

func TestRunServicesReturnsAServiceError(t *testing.T) {
	boom := errors.New("boom")
	svcs := []Service{{Name: "s", Run: func(context.Context, svc.Env, *config.Config) error { return boom }}}
	env := svc.Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: health.NewChecks()}
	configs := make(chan *config.Config, 1)
	configs <- &config.Config{Hash: "a"}
	if err := runServices(context.Background(), env, nil, svcs, configs); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
}

// TestRunServicesRegisterMetricsOnEveryConfiguration: services that
// register their collectors on each start (as every weft service does) keep
// running through configuration changes, and /metrics serves the running
// generation's collectors beside the process's own.
func TestRunServicesRegisterMetricsOnEveryConfiguration(t *testing.T) {
	started := make(chan string)
	svcs := []Service{{Name: "s", Run: func(ctx context.Context, env svc.Env, cfg *config.Config) error {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_s_starts_total", Help: "Starts."})
		if err := svc.Register(env.Registry, "s", c); err != nil {
			return err
		}
		c.Inc()
		started <- cfg.Hash
		<-ctx.Done()
		return nil
	}}}
	base := prometheus.NewRegistry()
	base.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_process_up", Help: "Up."}))
	gens := &generations{base: base}
	env := svc.Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: health.NewChecks(), Registry: base}
	configs := make(chan *config.Config)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServices(ctx, env, gens, svcs, configs) }()
	for _, h := range []string{"a", "b", "c"} {
		select {
		case configs <- &config.Config{Hash: h}:
		case err := <-done:
			t.Fatalf("services stopped before configuration %s: %v", h, err)
		}
		select {
		case got := <-started:
			if got != h {
				t.Fatalf("started on %s, want %s", got, h)
			}
		case err := <-done:
			t.Fatalf("services stopped on configuration %s: %v", h, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("services did not start on configuration %s", h)
		}
	}
	fams, err := gens.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got[f.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if _, ok := got["weft_process_up"]; !ok || got["weft_s_starts_total"] != 1 {
		t.Fatalf("gathered %v, want the process's gauge and the running generation's counter at 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
