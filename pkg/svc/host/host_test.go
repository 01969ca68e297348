package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

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
	go func() { done <- runServices(ctx, env, svcs, configs) }()
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
	if err := runServices(context.Background(), env, svcs, configs); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
}
