package relay_test

import (
	"context"
	"testing"

	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/services/watcher/relay"
)

// TestRenewalsRenewAfterTheLowestSequence: a worker renewing the lost
// consumer starts it after the lowest sequence any worker reported, so a
// write another worker had not reached is delivered again, not skipped.
func TestRenewalsRenewAfterTheLowestSequence(t *testing.T) {
	var got []uint64
	renew := func(_ context.Context, after uint64) (bus.MessageSource, error) {
		got = append(got, after)
		return nil, nil
	}
	rs := relay.Renewals(renew, 3)
	steps := []struct {
		worker int
		after  uint64
		want   uint64
	}{
		{0, 50, 50}, // the only one known
		{1, 40, 40},
		{2, 60, 40}, // worker 1 is behind
		{1, 70, 50}, // worker 1 caught up; worker 0 is now the lowest
	}
	for i, st := range steps {
		if _, err := rs[st.worker](context.Background(), st.after); err != nil {
			t.Fatal(err)
		}
		if got[i] != st.want {
			t.Errorf("step %d: worker %d after %d renewed after %d, want %d", i, st.worker, st.after, got[i], st.want)
		}
	}
}
