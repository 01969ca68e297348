package pause_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/svc/pause"
)

func TestFor(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"waited", context.Background(), time.Millisecond, nil},
		{"nothing to wait", context.Background(), 0, nil},
		{"ended before", done, time.Hour, context.Canceled},
		{"ended, nothing to wait", done, 0, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := pause.For(tc.ctx, tc.d); !errors.Is(err, tc.want) {
				t.Fatalf("For = %v, want %v", err, tc.want)
			}
		})
	}
	// A context that ends during the wait ends it.
	ctx, stop := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, stop)
	if err := pause.For(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("For with ctx cancelled while waiting = %v", err)
	}
}
