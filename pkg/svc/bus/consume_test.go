package bus_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/health"
	"github.com/weftio/weft/pkg/testkit"
)

// seen collects the versions a handler saw.
type seen struct {
	mu sync.Mutex
	v  map[uint64]int
}

func (s *seen) handle(_ context.Context, m jetstream.Msg) error {
	var r msg.Render
	if err := msg.Decode(m.Data(), &r); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v[r.Version]++
	return nil
}

func (s *seen) has(versions ...uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range versions {
		if s.v[v] == 0 {
			return fmt.Errorf("version %d not handled (handled: %v)", v, s.v)
		}
	}
	return nil
}

func publishRender(t *testing.T, js jetstream.JetStream, v uint64) {
	t.Helper()
	if _, err := bus.Publish(context.Background(), js, msg.RenderSubject("x"), "", msg.Render{Target: "x", Version: v, BundleHash: "h"}); err != nil {
		t.Fatal(err)
	}
}

// TestConsumeRenewsADeletedConsumer: a consumer deleted under Consume (an
// operator's `nats consumer rm`, or its only node lost) is reported not
// ready, created again after the last message handled, and read on: the
// messages published meanwhile are handled, and it does not start over.
func TestConsumeRenewsADeletedConsumer(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	ctx := context.Background()
	cfg := jetstream.ConsumerConfig{Durable: "renewed", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, FilterSubject: msg.RenderAll}
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, msg.StreamRenders, cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := options(t, env)
	checks := health.NewChecks()
	o.Health = checks
	if o.Renew, err = bus.Renew(b.JS, msg.StreamRenders, cfg); err != nil {
		t.Fatal(err)
	}
	s := &seen{v: map[uint64]int{}}
	testkit.Run(t, func(ctx context.Context) error { return bus.Consume(ctx, cons, s.handle, o) })
	publishRender(t, b.JS, 1)
	publishRender(t, b.JS, 2)
	testkit.Eventually(t, 10*time.Second, func() error { return s.has(1, 2) })
	if err := checks.Ready(); err != nil {
		t.Fatalf("ready before the loss: %v", err)
	}
	if err := b.JS.DeleteConsumer(ctx, msg.StreamRenders, "renewed"); err != nil {
		t.Fatal(err)
	}
	publishRender(t, b.JS, 3)
	testkit.Eventually(t, 20*time.Second, func() error { return s.has(3) })
	testkit.Eventually(t, 10*time.Second, checks.Ready)
	publishRender(t, b.JS, 4)
	testkit.Eventually(t, 10*time.Second, func() error { return s.has(4) })
	// Handlers are idempotent and delivery is at least once: what counts
	// is that nothing published while the consumer was gone is lost and
	// that the renewed consumer does not start over from the first
	// message. (A message handled just before the loss is rarely seen a
	// second time: its acknowledgement and the deletion race.)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.v[1]; n != 1 {
		t.Errorf("version 1 handled %d times: the renewed consumer started over", n)
	}
	for _, v := range []uint64{3, 4} {
		if n := s.v[v]; n != 1 {
			t.Errorf("version %d handled %d times", v, n)
		}
	}
	if !strings.Contains(env.Logs.String(), "consumer lost; renewing it") {
		t.Error("the loss was not logged")
	}
}

// TestConsumeWithoutRenewalReportsTheLoss: with nothing to renew it, a lost
// consumer ends Consume with an error (the service stops and is restarted)
// instead of leaving a replica that hears nothing.
func TestConsumeWithoutRenewalReportsTheLoss(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	ctx := context.Background()
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, msg.StreamRenders, jetstream.ConsumerConfig{Durable: "once", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	o := options(t, env)
	checks := health.NewChecks()
	o.Health = checks
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- bus.Consume(cctx, cons, (&seen{v: map[uint64]int{}}).handle, o) }()
	testkit.Eventually(t, 5*time.Second, checks.Ready)
	if err := b.JS.DeleteConsumer(ctx, msg.StreamRenders, "once"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Consume returned nil for a lost consumer")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Consume went on reading a deleted consumer")
	}
}

// TestConsumeRenewsAWorkQueueConsumer: a work-queue stream takes only
// consumers that deliver all it holds (what no one acknowledged), so its
// lost consumer is made again as configured, not from a start sequence,
// and the messages published meanwhile are handled.
func TestConsumeRenewsAWorkQueueConsumer(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	ctx := context.Background()
	subject := msg.PullSubject("n1")
	cfg := jetstream.ConsumerConfig{Durable: "wq", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, FilterSubject: subject}
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, msg.StreamPulls, cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := options(t, env)
	if o.Renew, err = bus.Renew(b.JS, msg.StreamPulls, cfg); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int]int{}
	testkit.Run(t, func(ctx context.Context) error {
		return bus.Consume(ctx, cons, func(_ context.Context, m jetstream.Msg) error {
			var p msg.PullOrder
			if err := msg.Decode(m.Data(), &p); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			got[p.Attempt]++
			return nil
		}, o)
	})
	publish := func(attempt int) {
		t.Helper()
		p := msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "a", Name: "b", UID: "u", Image: "r/i:1", Node: "n1", Attempt: attempt}, Mode: msg.PullModeCRI, Deadline: time.Now().Add(time.Minute)}
		if _, err := bus.Publish(ctx, b.JS, subject, p.ID(), p); err != nil {
			t.Fatal(err)
		}
	}
	handled := func(attempts ...int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, a := range attempts {
				if got[a] == 0 {
					return fmt.Errorf("attempt %d not handled (handled: %v)", a, got)
				}
			}
			return nil
		}
	}
	publish(1)
	testkit.Eventually(t, 10*time.Second, handled(1))
	if err := b.JS.DeleteConsumer(ctx, msg.StreamPulls, "wq"); err != nil {
		t.Fatal(err)
	}
	publish(2)
	testkit.Eventually(t, 20*time.Second, handled(2))
	if c, err := b.JS.Consumer(ctx, msg.StreamPulls, "wq"); err != nil || c.CachedInfo().Config.DeliverPolicy != jetstream.DeliverAllPolicy {
		t.Fatalf("renewed consumer: %v %v", c, err)
	}
}
