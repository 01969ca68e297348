package statuslease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftio/weft/services/watcher/statuslease"
)

func TestBackoff(t *testing.T) {
	for _, c := range []struct{ prev, want time.Duration }{
		{0, statuslease.RetryMin},
		{statuslease.RetryMin, 2 * statuslease.RetryMin},
		{20 * time.Second, statuslease.RetryMax},
		{statuslease.RetryMax, statuslease.RetryMax},
	} {
		if got := statuslease.Backoff(c.prev); got != c.want {
			t.Errorf("Backoff(%v) = %v, want %v", c.prev, got, c.want)
		}
	}
}

// TestLoop checks that Loop reconciles at once, again after a failure
// (reported with the wait), on a poke, and returns when its context ends.
func TestLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	poke := make(chan struct{}, 1)
	calls := make(chan int)
	results := []error{errors.New("not yet"), nil, nil}
	n := 0
	var failures []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		statuslease.Loop(ctx, poke, 0, func(context.Context) error {
			err := results[n]
			n++
			calls <- n
			return err
		}, func(err error, retryIn time.Duration) {
			failures = append(failures, retryIn)
		})
	}()
	next := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(30 * time.Second):
			t.Fatalf("no reconcile %s", what)
		}
	}
	next("at once")
	next("after the failure")
	poke <- struct{}{}
	next("on a poke")
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Loop did not return when its context ended")
	}
	if len(failures) != 1 || failures[0] != statuslease.RetryMin {
		t.Errorf("failures reported with waits %v, want [%v]", failures, statuslease.RetryMin)
	}
}
