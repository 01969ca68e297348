package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/agent"
)

// TestAgentWokenWhenASlotFrees: an order waiting for a full limit is
// pulled as soon as the slot it waits for is freed, released by its
// holder or expired after its holder died, though the agent would look
// again only after an hour (QueueRetry): only the free can have woken it.
// While it waits, the order stays in the agent's hand, its message kept
// alive past several AckWaits: neither redelivered nor sent back.
func TestAgentWokenWhenASlotFrees(t *testing.T) {
	tests := []struct {
		name string
		free func(h *slots.Held)
	}{
		{"released", (*slots.Held).Release},
		{"holder died, TTL over", (*slots.Held).Abandon},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(o *agent.Options) { o.QueueRetry = time.Hour })
			img := r.open.PushPlain(t, "shop/web", "1")
			ctx := context.Background()
			leases, err := r.bus.JS.KeyValue(ctx, msg.BucketLeases)
			if err != nil {
				t.Fatal(err)
			}
			elsewhere, err := slots.New(leases, r.bus.JS, slots.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			other, err := elsewhere.Acquire(ctx, "another-pull", slots.Limit{Scope: msg.ClusterSlotScope, N: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(other.Release)
			o := r.orderWith(t, img.Ref, 5*time.Minute, msg.PullLimits{Cluster: 1, PerNode: 1})
			testkit.Eventually(t, time.Minute, func() error {
				if q := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_queued_pulls"); q != 1 {
					return fmt.Errorf("queued pulls %v, want 1", q)
				}
				return nil
			})
			// Past several AckWaits (2 s), the order is still in hand.
			time.Sleep(5 * time.Second)
			if st := r.status(t, o); st.Phase != msg.PullPending {
				t.Fatalf("status while the limit is full %+v, want Pending", st)
			}
			cons, err := r.bus.JS.Consumer(ctx, msg.StreamPulls, agent.ConsumerName(node))
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumRedelivered != 0 || info.NumAckPending != 1 {
				t.Fatalf("while waiting: %d redelivered, %d pending acknowledgement; want the order kept in hand (0, 1)", info.NumRedelivered, info.NumAckPending)
			}
			tc.free(other)
			if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != img.ID {
				t.Fatalf("outcome %+v, want pulled once the slot was freed", p)
			}
			if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_retries_total"); n != 0 {
				t.Fatalf("retries %v: waiting for a slot is no failure", n)
			}
		})
	}
}

// TestAgentWaitingRoomFull: orders waiting beyond Waiting go back to the
// queue (delivered again after about QueueRetry) rather than taking every
// consume loop; all are pulled once the slot is free.
func TestAgentWaitingRoomFull(t *testing.T) {
	r := newRig(t, func(o *agent.Options) { o.Waiting, o.QueueRetry = 1, 300*time.Millisecond })
	other := holdSlot(t, r.bus, "another-pull", slots.Limit{Scope: msg.ClusterSlotScope, N: 1})
	var orders []msg.PullOrder
	for i := range 3 {
		img := r.open.PushPlain(t, fmt.Sprintf("shop/web-%d", i), "1")
		orders = append(orders, r.orderWith(t, img.Ref, 5*time.Minute, msg.PullLimits{Cluster: 1}))
	}
	ctx := context.Background()
	cons, err := r.bus.JS.Consumer(ctx, msg.StreamPulls, agent.ConsumerName(node))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumRedelivered == 0 {
			return fmt.Errorf("no order sent back to the queue with a waiting room of 1")
		}
		if q := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_queued_pulls"); q != 3 {
			return fmt.Errorf("queued pulls %v, want 3", q)
		}
		return nil
	})
	other.Release()
	for _, o := range orders {
		if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled {
			t.Fatalf("outcome %+v, want pulled once the slot was free", p)
		}
	}
}
