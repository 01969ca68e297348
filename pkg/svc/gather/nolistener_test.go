package gather_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/pkg/testkit"
)

// TestRequestNobodyHeardIsSentAgain: a request sent while no validator is
// subscribed gets the server's "no responders" status, which is no answer:
// the gather asks again, and a kind that subscribes before the timeout
// answers. Nothing is counted as an invalid reply.
func TestRequestNobodyHeardIsSentAgain(t *testing.T) {
	bus := testkit.NATS(t)
	subject := msg.ValidateSubject("edge")
	started := make(chan struct{})
	go func() {
		<-started
		time.Sleep(500 * time.Millisecond) // the validator comes up after the request went out
		_, err := bus.NC.Subscribe(subject, func(m *nats.Msg) {
			rep, err := msg.NewMsg(m.Reply, "", msg.ValidateReply{Kind: "haproxy", OK: true})
			if err == nil {
				_ = bus.NC.PublishMsg(rep)
			}
		})
		if err != nil {
			t.Error(err)
		}
	}()
	close(started)
	res, err := gather.Validate(context.Background(), bus.NC, subject, msg.ValidateRequest{Target: "edge", BundleHash: "h"}, []string{"haproxy"}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Invalid) != 0 || len(res.Missing) != 0 || len(res.Replies) != 1 || !res.OK() {
		t.Fatalf("result %+v: want the one kind's answer, no invalid reply, nothing missing", res)
	}
}
