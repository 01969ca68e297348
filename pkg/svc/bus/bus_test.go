package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

func options(t *testing.T, env *testkit.Env) bus.Options {
	m, err := bus.NewMetrics("test", env.Registry)
	if err != nil {
		t.Fatal(err)
	}
	return bus.Options{Service: "test", Stage: "renders", Log: env.Log, Tracer: env.Tracer.Tracer("test"), Metrics: m, DLQ: env.JS, AckWait: 300 * time.Millisecond}
}

// rendersConsumer is a bus, an environment and a durable consumer "t" of
// the renders stream with ackWait.
func rendersConsumer(t *testing.T, ackWait time.Duration) (*testkit.Bus, *testkit.Env, jetstream.Consumer) {
	t.Helper()
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	cons, err := b.JS.CreateOrUpdateConsumer(context.Background(), msg.StreamRenders, jetstream.ConsumerConfig{
		Durable: "t", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, env, cons
}

// TestConsumeSettles checks each handler outcome's ack decision.
func TestConsumeSettles(t *testing.T) {
	cases := []struct {
		name       string
		handler    func(calls int) error
		wantCalls  int
		wantDLQ    bool
		wantResult string
		quiet      bool // no WARN line: not a failure
	}{
		{"ack", func(int) error { return nil }, 1, false, "ack", false},
		{"permanent is terminated and dead-lettered", func(int) error { return msg.Permanent(errors.New("bad")) }, 1, true, "term", false},
		{"transient is redelivered", func(calls int) error {
			if calls == 1 {
				return msg.Retry(errors.New("busy"), 10*time.Millisecond)
			}
			return nil
		}, 2, false, "ack", false},
		{"slow handler is kept alive", func(calls int) error { time.Sleep(time.Second); return nil }, 1, false, "ack", false},
		{"waiting for capacity is redelivered, not a failure", func(calls int) error {
			if calls < 3 {
				return msg.Retry(fmt.Errorf("all 2 slots of cluster are held: %w", msg.ErrWaiting), 10*time.Millisecond)
			}
			return nil
		}, 3, false, "ack", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, env, cons := rendersConsumer(t, 300*time.Millisecond)
			ctx := context.Background()
			var calls atomic.Int32
			done := make(chan struct{}, 10)
			o := options(t, env)
			testkit.Run(t, func(ctx context.Context) error {
				return bus.Consume(ctx, cons, func(ctx context.Context, m jetstream.Msg) error {
					defer func() { done <- struct{}{} }()
					return tc.handler(int(calls.Add(1)))
				}, o)
			})
			r := msg.Render{Target: "x", Version: 1, BundleHash: "h"}
			if _, err := bus.Publish(ctx, b.JS, msg.RenderSubject("x"), "", r); err != nil {
				t.Fatal(err)
			}
			for range tc.wantCalls {
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("handler not called")
				}
			}
			time.Sleep(700 * time.Millisecond) // longer than AckWait: a missing ack would redeliver
			if n := int(calls.Load()); n != tc.wantCalls {
				t.Fatalf("handler called %d times, want %d", n, tc.wantCalls)
			}
			if got := testkit.CounterValue(t, env.Registry, "weft_test_dead_letters_total"); (got > 0) != tc.wantDLQ {
				t.Fatalf("dead letters = %v, want %v", got, tc.wantDLQ)
			}
			if tc.wantDLQ {
				st, _ := b.JS.Stream(ctx, msg.StreamDLQ)
				m, err := st.GetLastMsgForSubject(ctx, msg.DLQSubject("test"))
				if err != nil {
					t.Fatal(err)
				}
				var dl msg.DeadLetter
				if err := msg.Decode(m.Data, &dl); err != nil || dl.Reason != "bad" || dl.Stream != msg.StreamRenders || dl.Sequence != 1 {
					t.Fatalf("dead letter = %+v %v", dl, err)
				}
			}
			if logs := env.Logs.String(); tc.quiet && strings.Contains(logs, `"level":"WARN"`) {
				t.Fatalf("a warning for no failure:\n%s", logs)
			}
			if len(env.Spans.Ended()) < tc.wantCalls {
				t.Fatalf("spans = %d, want one per handled message", len(env.Spans.Ended()))
			}
		})
	}
}

func TestPublishCarriesTraceAndID(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	ctx, span := env.Tracer.Tracer("t").Start(context.Background(), "root")
	defer span.End()
	ack, err := bus.Publish(ctx, b.JS, msg.RenderSubject("x"), "x@1", msg.Render{Target: "x", Version: 1, BundleHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(ctx, b.JS, msg.RenderSubject("x"), "x@1", msg.Render{Target: "x", Version: 1, BundleHash: "h"}); err != nil {
		t.Fatal(err)
	}
	st, _ := b.JS.Stream(context.Background(), msg.StreamRenders)
	info, _ := st.Info(context.Background())
	if info.State.Msgs != 1 {
		t.Fatalf("messages = %d, want the duplicate dropped", info.State.Msgs)
	}
	m, err := st.GetMsg(context.Background(), ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if tp := m.Header.Get(msg.HeaderTraceParent); tp == "" || m.Header.Get(msg.HeaderSchema) != msg.SchemaRender {
		t.Fatalf("headers = %v", m.Header)
	}
}

func TestServeDeadLettersPermanentErrors(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	o := options(t, env)
	o.Stage = "trigger"
	handled := make(chan struct{}, 1)
	testkit.Run(t, func(ctx context.Context) error {
		return bus.Serve(ctx, b.NC, "weft.trigger.render.*", "q", func(ctx context.Context, m *nats.Msg) error {
			defer func() { handled <- struct{}{} }()
			_, err := msg.DecodeTrigger(m.Data)
			return err
		}, o)
	})
	testkit.Eventually(t, 5*time.Second, func() error {
		if err := b.NC.Publish(msg.TriggerRenderSubject("x"), []byte("{oops")); err != nil {
			return err
		}
		select {
		case <-handled:
			return nil
		case <-time.After(200 * time.Millisecond):
			return errors.New("not handled")
		}
	})
	testkit.Eventually(t, 5*time.Second, func() error {
		if testkit.CounterValue(t, env.Registry, "weft_test_dead_letters_total") < 1 {
			return errors.New("no dead letter")
		}
		return nil
	})
}

// TestConsumeInterruptedByTheShutdown: a handler that fails because its
// context was cancelled (the process stopping) gave no verdict: the
// message is not dead-lettered, no failure is logged, and the next
// consumer gets it shortly after.
func TestConsumeInterruptedByTheShutdown(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	ctx := context.Background()
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, msg.StreamRenders, jetstream.ConsumerConfig{
		Durable: "t", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := options(t, env)
	o.AckWait = time.Minute // a redelivery can only come from the Nak
	started := make(chan struct{}, 1)
	stop := testkit.Run(t, func(ctx context.Context) error {
		return bus.Consume(ctx, cons, func(ctx context.Context, m jetstream.Msg) error {
			started <- struct{}{}
			<-ctx.Done()
			return msg.Permanent(fmt.Errorf("apply: %w", ctx.Err()))
		}, o)
	})
	if _, err := bus.Publish(ctx, b.JS, msg.RenderSubject("x"), "", msg.Render{Target: "x", Version: 1, BundleHash: "h"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
	stop()
	again := make(chan uint64, 1)
	testkit.Run(t, func(ctx context.Context) error {
		return bus.Consume(ctx, cons, func(ctx context.Context, m jetstream.Msg) error {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			again <- meta.NumDelivered
			return nil
		}, o)
	})
	select {
	case n := <-again:
		if n != 2 {
			t.Fatalf("delivered %d times, want 2", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the interrupted message was not delivered again")
	}
	if got := testkit.CounterValue(t, env.Registry, "weft_test_dead_letters_total"); got != 0 {
		t.Fatalf("dead letters = %v, want none", got)
	}
	for l := range strings.Lines(env.Logs.String()) {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"level":"WARN"`) {
			t.Errorf("logged: %s", l)
		}
	}
}

// TestServeWorkersAnswerWhileOneIsBusy: with two workers, a request is
// answered while another request's handler is still running (it waits for
// that answer, so with one worker neither would be answered).
func TestServeWorkersAnswerWhileOneIsBusy(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	o := options(t, env)
	o.Stage, o.Workers = "requests", 2
	quickAnswered, slowStarted := make(chan struct{}), make(chan struct{})
	testkit.Run(t, func(ctx context.Context) error {
		return bus.Serve(ctx, b.NC, "weft.test.serve", "q", func(ctx context.Context, m *nats.Msg) error {
			if string(m.Data) == "slow" {
				close(slowStarted)
				select {
				case <-quickAnswered:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return m.Respond(m.Data)
		}, o)
	})
	testkit.Eventually(t, 5*time.Second, func() error {
		_, err := b.NC.Request("weft.test.serve", []byte("ping"), time.Second)
		return err
	})
	slow := make(chan error, 1)
	go func() {
		_, err := b.NC.Request("weft.test.serve", []byte("slow"), 10*time.Second)
		slow <- err
	}()
	<-slowStarted
	r, err := b.NC.Request("weft.test.serve", []byte("quick"), 5*time.Second)
	if err != nil {
		t.Fatalf("quick request while a slow one runs: %v", err)
	}
	if string(r.Data) != "quick" {
		t.Fatalf("answer %q", r.Data)
	}
	close(quickAnswered)
	if err := <-slow; err != nil {
		t.Fatalf("slow request: %v", err)
	}
}

func TestServeRejectsNegativeWorkers(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	o := options(t, env)
	o.Stage, o.Workers = "requests", -1
	if err := bus.Serve(context.Background(), b.NC, "weft.test.serve", "q", func(context.Context, *nats.Msg) error { return nil }, o); err == nil {
		t.Fatal("Serve took a negative worker count")
	}
}

// TestUnconfirmedHandledAgainInPlace: a message the recorded state does
// not confirm yet is handled again in place a millisecond or two later,
// not redelivered (the write that follows it lands meanwhile); one still
// unconfirmed after that is redelivered.
func TestUnconfirmedHandledAgainInPlace(t *testing.T) {
	cases := []struct {
		name        string
		confirmedAt int      // the call from which the state confirms the message
		want        []uint64 // the delivery of each call
	}{
		{"confirmed at the second try", 2, []uint64{1, 1}},
		{"confirmed at the third try", 3, []uint64{1, 1, 1}},
		{"still unconfirmed: redelivered", 4, []uint64{1, 1, 1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, env, cons := rendersConsumer(t, 5*time.Second)
			ctx := context.Background()
			calls := make(chan uint64, 10)
			var n atomic.Int32
			testkit.Run(t, func(ctx context.Context) error {
				return bus.Consume(ctx, cons, func(ctx context.Context, m jetstream.Msg) error {
					meta, err := m.Metadata()
					if err != nil {
						return err
					}
					calls <- meta.NumDelivered
					if int(n.Add(1)) < tc.confirmedAt {
						return msg.Unconfirmed(msg.AgeOf(meta, nil), "render x v1: the renderer's status is at v0")
					}
					return nil
				}, options(t, env))
			})
			if _, err := bus.Publish(ctx, b.JS, msg.RenderSubject("x"), "", msg.Render{Target: "x", Version: 1, BundleHash: "h"}); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for len(got) < len(tc.want) {
				select {
				case n := <-calls:
					got = append(got, n)
				case <-time.After(10 * time.Second):
					t.Fatalf("handled %d times (%v), want %d", len(got), got, len(tc.want))
				}
			}
			select {
			case n := <-calls:
				t.Fatalf("handled again (delivery %d) after %v", n, got)
			case <-time.After(300 * time.Millisecond):
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("deliveries of the calls = %v, want %v", got, tc.want)
			}
		})
	}
}
