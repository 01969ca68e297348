package debounce_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer/debounce"
)

// TestBurstCoalesces pokes in bursts and counts fires: a burst costs one
// fire per edge, whatever its length.
func TestBurstCoalesces(t *testing.T) {
	cases := []struct {
		name    string
		leading bool
		pokes   int
		want    int64
	}{
		{"lone event, leading", true, 1, 1},
		{"burst, leading and trailing", true, 1000, 2},
		{"lone event, trailing only", false, 1, 1},
		{"burst, trailing only", false, 1000, 1},
		{"queued burst, leading", true, -1000, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fires atomic.Int64
			done := make(chan struct{}, 4)
			d, err := debounce.New(50*time.Millisecond, tc.leading, func() { fires.Add(1); done <- struct{}{} })
			if err != nil {
				t.Fatal(err)
			}
			defer d.Stop()
			// Negative counts are a queued burst: PokeMore for all
			// but the last event.
			for i := range abs(tc.pokes) {
				if tc.pokes < 0 && i < abs(tc.pokes)-1 {
					d.PokeMore()
				} else {
					d.Poke()
				}
			}
			for range tc.want {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("only %d fires", fires.Load())
				}
			}
			// No further fire arrives after the quiet period.
			select {
			case <-done:
				t.Fatalf("extra fire: %d, want %d", fires.Load(), tc.want)
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
}

func TestRejectsBadOptions(t *testing.T) {
	if _, err := debounce.New(-time.Second, true, func() {}); err == nil {
		t.Error("negative wait accepted")
	}
	if _, err := debounce.New(time.Second, true, nil); err == nil {
		t.Error("nil fire accepted")
	}
	if _, err := debounce.New(time.Second, true, func() {}, debounce.WithMaxWait(time.Millisecond)); err == nil {
		t.Error("max wait shorter than the wait accepted")
	}
	if _, err := debounce.New(time.Second, true, func() {}, debounce.WithMaxWait(-time.Second)); err == nil {
		t.Error("negative max wait accepted")
	}
}

// TestMaxWaitBoundsAStream pokes without ever pausing for the wait: without
// a maximum wait nothing fires until the stream ends; with one, fires come
// during the stream.
func TestMaxWaitBoundsAStream(t *testing.T) {
	cases := []struct {
		name    string
		maxWait time.Duration
		atLeast int64
		atMost  int64
	}{
		{"no max wait", 0, 0, 0},
		{"max wait", 400 * time.Millisecond, 2, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fires atomic.Int64
			d, err := debounce.New(300*time.Millisecond, false, func() { fires.Add(1) }, debounce.WithMaxWait(tc.maxWait))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Stop()
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
				d.Poke()
				time.Sleep(20 * time.Millisecond)
			}
			if n := fires.Load(); n < tc.atLeast || n > tc.atMost {
				t.Fatalf("%d fires during the stream, want %d..%d", n, tc.atLeast, tc.atMost)
			}
			// The stream's tail still gets its trailing fire.
			during := fires.Load()
			testkit.Eventually(t, 5*time.Second, func() error {
				if n := fires.Load(); n != during+1 {
					return fmt.Errorf("%d fires after the stream, want %d", n, during+1)
				}
				return nil
			})
		})
	}
}

func abs(n int) int { return max(n, -n) }
