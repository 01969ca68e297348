package agent

import (
	"testing"
	"time"
)

// TestQueueBookkeeping: deliveries that found a limit full are no tries
// (the retry delay does not grow with them); an order counts as queued
// while it waits in hand, or waits in the queue and was seen lately, and
// is forgotten when it ends or long after it was last seen (never while
// in hand).
func TestQueueBookkeeping(t *testing.T) {
	a := &agent{o: Options{AckWait: 2 * time.Second, QueueRetry: 100 * time.Millisecond}, waiters: map[string]*waiter{}}
	now := time.Now()
	a.waiters["waits"] = &waiter{naks: 5, waiting: true, seen: now}
	a.waiters["pulls"] = &waiter{naks: 3, waiting: false, seen: now}
	a.waiters["gone"] = &waiter{naks: 1, waiting: true, seen: now.Add(-10 * time.Second)}
	a.waiters["lost"] = &waiter{naks: 1, waiting: true, seen: now.Add(-2 * time.Hour)}
	a.waiters["held"] = &waiter{waiting: true, inHand: true, seen: now.Add(-2 * time.Hour)}

	cases := []struct {
		id         string
		deliveries int
		want       int
	}{
		{"waits", 6, 1},   // 5 waits, then its first try
		{"pulls", 5, 2},   // 3 waits, 2 tries
		{"unknown", 4, 4}, // never waited here
		{"waits", 1, 1},   // never below 1
		{"pulls", 3, 1},   // a delivery count from before a restart
	}
	for _, tc := range cases {
		if got := a.tries(tc.id, tc.deliveries); got != tc.want {
			t.Errorf("tries(%s, %d) = %d, want %d", tc.id, tc.deliveries, got, tc.want)
		}
	}
	if backoff(a.tries("waits", 6), now.Add(time.Hour)) != retryMin {
		t.Errorf("the first failure after 5 waits is retried after %v, want %v", backoff(a.tries("waits", 6), now.Add(time.Hour)), retryMin)
	}
	// "waits" counts; "pulls" does not wait; "gone" was not seen for longer
	// than a wait takes; "lost" is forgotten; "held" waits in hand (for as
	// long as it takes).
	if q := a.queued(); q != 2 {
		t.Fatalf("queued = %v, want 2", q)
	}
	if _, ok := a.waiters["held"]; !ok {
		t.Fatal("an order waiting in hand is forgotten")
	}
	a.inHand("held", false)
	a.forget("held")
	if _, ok := a.waiters["lost"]; ok {
		t.Fatal("an order not seen for two hours is remembered")
	}
	if _, ok := a.waiters["gone"]; !ok {
		t.Fatal("an order seen 10s ago is forgotten")
	}
	a.started("waits")
	if q := a.queued(); q != 0 {
		t.Fatalf("queued = %v after the waiting order started, want 0", q)
	}
	if got := a.tries("waits", 7); got != 2 {
		t.Fatalf("tries after the start = %d, want 2 (the waits still do not count)", got)
	}
	a.forget("waits")
	if got := a.tries("waits", 7); got != 7 {
		t.Fatalf("tries of a forgotten order = %d, want its deliveries", got)
	}
}
