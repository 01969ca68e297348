package debounce_test

import (
	"sync/atomic"
	"testing"
	"time"

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
			for range tc.pokes {
				d.Poke()
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
}

func TestStopCancelsPendingFire(t *testing.T) {
	var fires atomic.Int64
	d, _ := debounce.New(50*time.Millisecond, false, func() { fires.Add(1) })
	d.Poke()
	d.Stop()
	d.Poke()
	time.Sleep(150 * time.Millisecond)
	if n := fires.Load(); n != 0 {
		t.Fatalf("fired %d times after Stop", n)
	}
}
