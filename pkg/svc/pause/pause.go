// Package pause waits for a while unless a context ends first: the wait
// between tries, between polls and before a delayed pass, as every service
// does it. It owns nothing and starts nothing that outlives the call.
package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx is done; then it returns ctx's error. A d of
// zero or less returns at once (ctx's error if it is done).
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
