package validator

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestWriteStatusReadsTheRendererAgain: a verdict on a render confirmed
// when the renderer's status was at v1 finds a validation status at v2. If
// the renderer's status has reached v2 since (another replica validated
// the newer render meanwhile), that status stays and the older verdict
// does not move it back; if it has not, the status was written from a
// message nothing confirmed and is replaced. On a 3-node cluster (R3
// buckets), as replicas run: the renderer's and the other replica's writes
// go through one node, this validator reads and writes through another.
// With a prior read (the validation status read before the validation),
// taken before the other replica's write, the write finds the status
// changed, reads it again and comes to the same.
func TestWriteStatusReadsTheRendererAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	others := c.Bus(t, 0)
	c.Provision(t, others)
	bus := c.Bus(t, 1)
	ctx := context.Background()
	othersStatus, err := others.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	status, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		target       string
		rendered     uint64 // the renderer's status when the verdict is written
		wantVersion  uint64
		wantLastGood string
		wantReplaced bool
		stalePrior   bool // the status was read before the other replica wrote it
	}{
		{name: "a newer render validated meanwhile", target: "edge-1", rendered: 2, wantVersion: 2, wantLastGood: "b"},
		{name: "a status beyond every render", target: "edge-2", rendered: 1, wantVersion: 1, wantLastGood: "a", wantReplaced: true},
		{name: "a newer render validated after the prior read", target: "edge-3", rendered: 2, wantVersion: 2, wantLastGood: "b", stalePrior: true},
		{name: "a status beyond every render, written after the prior read", target: "edge-4", rendered: 1, wantVersion: 1, wantLastGood: "a", wantReplaced: true, stalePrior: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			newer := msg.ValidationStatus{Target: tc.target, Version: 2, BundleHash: "b", OK: true, LastGood: "b", LastGoodVersion: 2}
			verdict := msg.Validated{Target: tc.target, Version: 1, BundleHash: "a", OK: true}
			env := testkit.NewEnv(t, bus, "v1")
			if _, err := msg.StoreStatus(ctx, othersStatus, msg.RenderStatusKey(tc.target), msg.RenderStatus{Target: tc.target, Version: tc.rendered, BundleHash: "b"}, 0); err != nil {
				t.Fatal(err)
			}
			var prior *priorState
			if tc.stalePrior {
				old := msg.ValidationStatus{Target: tc.target, Version: 1, BundleHash: "z", OK: true, LastGood: "z", LastGoodVersion: 1}
				rev, err := msg.StoreStatus(ctx, othersStatus, msg.ValidationStatusKey(tc.target), old, 0)
				if err != nil {
					t.Fatal(err)
				}
				prior = &priorState{st: old, rev: rev}
				if _, err := msg.StoreStatus(ctx, othersStatus, msg.ValidationStatusKey(tc.target), newer, rev); err != nil {
					t.Fatal(err)
				}
			} else if _, err := msg.StoreStatus(ctx, othersStatus, msg.ValidationStatusKey(tc.target), newer, 0); err != nil {
				t.Fatal(err)
			}
			v := &validator{env: env.Env, status: status}
			if err := v.writeStatus(ctx, verdict, 1, prior); err != nil {
				t.Fatal(err)
			}
			var st msg.ValidationStatus
			if _, err := msg.LoadStatus(ctx, othersStatus, msg.ValidationStatusKey(tc.target), &st); err != nil {
				t.Fatal(err)
			}
			if st.Version != tc.wantVersion || st.LastGood != tc.wantLastGood {
				t.Fatalf("validation status v%d, last good %q; want v%d, %q", st.Version, st.LastGood, tc.wantVersion, tc.wantLastGood)
			}
			if replaced := strings.Contains(env.Logs.String(), "never rendered"); replaced != tc.wantReplaced {
				t.Fatalf("replaced: %v, want %v; logs:\n%s", replaced, tc.wantReplaced, env.Logs.String())
			}
		})
	}
}

// TestStatusUpdateWhoseAnswerWasLost: a status change whose write landed
// but whose answer was lost is done, not superseded (made again, the
// change would find nothing left to change, and the confirmation would go
// uncounted and unlogged: msg.StoreStatus takes such a write as done);
// one that did not land is made again.
func TestStatusUpdateWhoseAnswerWasLost(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	kv, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	key := msg.ValidationStatusKey("edge")
	if _, err := msg.StoreStatus(ctx, kv, key, msg.ValidationStatus{Target: "edge", Pending: "b2", PendingVersion: 2, LastFull: "b1", LastFullVersion: 1}, 0); err != nil {
		t.Fatal(err)
	}
	lossy := &testkit.LostAnswers{KeyValue: kv, Land: true, Lose: 1}
	v := &validator{status: lossy}
	calls := 0
	err = v.updateStatus(ctx, "edge", func(st *msg.ValidationStatus) bool {
		calls++
		if st.Pending != "b2" {
			return false
		}
		st.Pending, st.PendingVersion, st.LastFull, st.LastFullVersion = "", 0, "b2", 2
		return true
	})
	if err != nil || lossy.Left() != 0 || calls != 1 {
		t.Fatalf("updateStatus = %v after %d calls of the change (answers still to lose: %d), want done after 1", err, calls, lossy.Left())
	}
	var st msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, kv, key, &st); err != nil || st.LastFull != "b2" || st.Pending != "" {
		t.Fatalf("status = %+v (%v), want b2 the base, nothing pending", st, err)
	}

	// A write that did not land: the change is made again on what is
	// there now.
	if _, err := msg.StoreStatus(ctx, kv, key, msg.ValidationStatus{Target: "edge", Pending: "b3", PendingVersion: 3, LastFull: "b2", LastFullVersion: 2}, mustRev(t, kv, key)); err != nil {
		t.Fatal(err)
	}
	calls = 0
	err = v.updateStatus(ctx, "edge", func(st *msg.ValidationStatus) bool {
		calls++
		if calls == 1 {
			// another writer comes first
			if _, err := msg.StoreStatus(ctx, kv, key, msg.ValidationStatus{Target: "edge", Pending: "b4", PendingVersion: 4, LastFull: "b2", LastFullVersion: 2}, mustRev(t, kv, key)); err != nil {
				t.Fatal(err)
			}
		}
		st.Checking, st.CheckingVersion = st.Pending, st.PendingVersion
		return true
	})
	if _, lerr := msg.LoadStatus(ctx, kv, key, &st); err != nil || lerr != nil || calls != 2 || st.Checking != "b4" {
		t.Fatalf("updateStatus = %v after %d calls, status %+v; want the change made again on b4", err, calls, st)
	}
}

func mustRev(t *testing.T, kv jetstream.KeyValue, key string) uint64 {
	t.Helper()
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}
