package validator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// blockingKind checks until its context ends, then fails with why it ended
// (or with fail, before any block, when set).
type blockingKind struct {
	started chan struct{}
	fail    error
}

func (blockingKind) Name() string { return "blocking" }

func (k blockingKind) Check(ctx context.Context, _ msg.Bundle) ([]msg.Problem, error) {
	if k.fail != nil {
		return nil, k.fail
	}
	close(k.started)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestNoAnswerWhileStopping: a check the shutdown cut short is no answer
// (the requester, hearing nothing, asks again and another replica
// answers), while a check that could not decide for another reason says so.
func TestNoAnswerWhileStopping(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fail      error
		wantReply bool
	}{
		{"stopping", nil, false},
		{"could not decide", errors.New("read bundle: nats: timeout"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testkit.NATS(t)
			env := testkit.NewEnv(t, b, "t")
			m, err := newMetrics(env.Registry)
			if err != nil {
				t.Fatal(err)
			}
			bd, err := msg.NewBundle("t", "", "haproxy.cfg", []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("global\n")}})
			if err != nil {
				t.Fatal(err)
			}
			store := msg.NewBundleStore(b.JS)
			if err := store.PutBundle(context.Background(), "h", bd); err != nil {
				t.Fatal(err)
			}
			v := &validator{env: env.Env, m: m, bundles: store}
			k := blockingKind{started: make(chan struct{}), fail: tc.fail}
			inbox := nats.NewInbox()
			sub, err := b.NC.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			req, err := msg.NewMsg(msg.ValidateSubject("t"), "", msg.ValidateRequest{Target: "t", BundleHash: "h", Kinds: []string{"blocking"}})
			if err != nil {
				t.Fatal(err)
			}
			req.Reply = inbox
			// Delivered through a subscription, as the bus hands requests
			// over (the reply goes out on the message's connection).
			reqs, err := b.NC.SubscribeSync(req.Subject)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.NC.PublishMsg(req); err != nil {
				t.Fatal(err)
			}
			if req, err = reqs.NextMsg(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- v.answer(k)(ctx, req) }()
			if tc.fail == nil {
				<-k.started
				cancel()
			}
			if err := <-done; err == nil {
				t.Fatal("the handler reported no failure")
			}
			cancel()
			// The reply, if any, was sent before the handler returned: a
			// round trip brings it in.
			if err := b.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			got, err := sub.NextMsg(100 * time.Millisecond)
			switch {
			case tc.wantReply && err != nil:
				t.Fatalf("no reply: %v", err)
			case !tc.wantReply && err == nil:
				t.Fatalf("answered while stopping: %s", got.Data)
			case tc.wantReply:
				var rep msg.ValidateReply
				if err := msg.Decode(got.Data, &rep); err != nil {
					t.Fatal(err)
				}
				if rep.OK || rep.Error != tc.fail.Error() {
					t.Fatalf("reply = %+v, want the failure %q", rep, tc.fail)
				}
			}
		})
	}
}
