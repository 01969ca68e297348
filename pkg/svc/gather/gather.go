// Package gather is the requesting side of scatter-gather validation: it
// publishes one request with a private reply subject, collects one reply per
// expected kind (the first from each; replicas of a kind share a queue
// group, so there is one), and stops when all expected kinds answered or the
// deadline passed. The result names the kinds that did not answer.
package gather

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// Result of one scatter-gather.
type Result struct {
	Replies []msg.ValidateReply // sorted by kind
	Missing []string            // expected kinds that did not answer
	Invalid []string            // replies that could not be decoded
}

// OK reports whether every expected kind answered and accepted.
func (r Result) OK() bool {
	if len(r.Missing) > 0 {
		return false
	}
	for _, rep := range r.Replies {
		if !rep.OK {
			return false
		}
	}
	return true
}

// Validate sends req on subject, naming the expected kinds (the others do
// not check), and gathers their replies until all answered or timeout
// passed. A request nobody listened to (no validator subscribed yet) is
// sent again every askAgainAfter until then.
func Validate(ctx context.Context, nc *nats.Conn, subject string, req msg.ValidateRequest, expected []string, timeout time.Duration) (Result, error) {
	req.Kinds = expected
	out, err := msg.NewMsg(subject, "", req)
	if err != nil {
		return Result{}, err
	}
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return Result{}, fmt.Errorf("gather: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	out.Reply = inbox
	telemetry.Inject(ctx, out.Header)
	if err := nc.PublishMsg(out); err != nil {
		return Result{}, fmt.Errorf("gather: publish: %w", err)
	}
	var again <-chan time.Time // set while nobody listened to the last request
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	want := map[string]bool{}
	for _, k := range expected {
		want[k] = true
	}
	var res Result
	for len(want) > 0 {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-timer.C:
			for k := range want {
				res.Missing = append(res.Missing, k)
			}
			slices.Sort(res.Missing)
			return res.sorted(), nil
		case <-again:
			again = nil
			if err := nc.PublishMsg(out); err != nil {
				return Result{}, fmt.Errorf("gather: publish: %w", err)
			}
		case m := <-ch:
			if noResponders(m) {
				// Nobody subscribed to subject when the request came:
				// no validator runs yet (they are starting, or
				// restarting). That is no answer: ask again until the
				// timeout, and the kinds that start in time answer.
				again = time.After(askAgainAfter)
				continue
			}
			var rep msg.ValidateReply
			if err := msg.Decode(m.Data, &rep); err != nil {
				res.Invalid = append(res.Invalid, err.Error())
				continue
			}
			if !want[rep.Kind] {
				continue // an unexpected kind, or a second answer
			}
			delete(want, rep.Kind)
			res.Replies = append(res.Replies, rep)
		}
	}
	return res.sorted(), nil
}

// askAgainAfter is how long Validate waits to send a request again that
// nobody listened to.
const askAgainAfter = 200 * time.Millisecond

// noResponders tells the server's answer to a request nobody subscribed
// to (status 503, no body) from a reply.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// Undecided names the expected kinds without a verdict: those that did not
// answer and those that answered that they could not decide (a bundle they
// could not read, a check that did not finish). Sorted.
func (r Result) Undecided() []string {
	out := slices.Clone(r.Missing)
	for _, rep := range r.Replies {
		if rep.Error != "" {
			out = append(out, rep.Kind)
		}
	}
	slices.Sort(out)
	return out
}

// Decided reports whether the result is a verdict: some kind refused, or
// every expected kind decided, or, with min > 0, at least min kinds
// accepted. A result that is not a verdict is asked again, never taken as
// a refusal.
func (r Result) Decided(min int) bool {
	accepted := 0
	for _, rep := range r.Replies {
		switch {
		case rep.Error != "":
		case !rep.OK:
			return true
		default:
			accepted++
		}
	}
	return len(r.Undecided()) == 0 || (min > 0 && accepted >= min)
}

// Accepted reports whether every kind that answered accepted, and either
// every expected kind answered or, with min > 0, at least min did.
func (r Result) Accepted(min int) bool {
	accepted := 0
	for _, rep := range r.Replies {
		switch {
		case rep.Error != "" && min > 0:
			// Could not decide: counts as missing when a minimum applies.
		case !rep.OK:
			return false
		default:
			accepted++
		}
	}
	return len(r.Undecided()) == 0 || (min > 0 && accepted >= min)
}

func (r Result) sorted() Result {
	slices.SortFunc(r.Replies, func(a, b msg.ValidateReply) int {
		switch {
		case a.Kind < b.Kind:
			return -1
		case a.Kind > b.Kind:
			return 1
		}
		return 0
	})
	return r
}
