package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/services/puller/cri"
)

type agent struct {
	env     svc.Env
	o       Options
	kv      jetstream.KeyValue
	metrics *metrics

	mu       sync.Mutex
	inFlight map[string]bool    // order ids being carried out here
	waiters  map[string]*waiter // orders that found a limit full, by id

	work chan struct{} // a token per order carried out (Parallel)
	room chan struct{} // a token per order waiting in hand (Waiting)
}

// errBusy: a copy of an order this agent is carrying out (delivered again
// while it waited in another loop's buffer); it is looked at again later.
var errBusy = errors.New("the order is being carried out by this agent")

// result is what one try at an order came to.
type result struct {
	outcome  string // msg.PullOutcome*; "" with err
	image    cri.Image
	ref      string // the runtime's id of the image pulled
	problems []string
	err      error
}

func (a *agent) onOrder(ctx context.Context, m jetstream.Msg) error {
	var o msg.PullOrder
	if err := msg.Decode(m.Data(), &o); err != nil {
		return err
	}
	if o.Node != a.o.Node || m.Subject() != msg.PullSubject(a.o.Node) {
		return msg.Permanent(fmt.Errorf("an order for node %q on %s, the subject of node %q", o.Node, m.Subject(), a.o.Node))
	}
	if o.Mode != msg.PullModeCRI {
		return msg.Permanent(fmt.Errorf("a %s-mode order is not for the node agent", o.Mode))
	}
	if !a.begin(o.ID()) {
		return msg.Retry(errBusy, a.o.AckWait)
	}
	defer a.end(o.ID())
	deliveries := 1
	if meta, err := m.Metadata(); err == nil {
		deliveries = int(meta.NumDelivered)
	}
	fw, _ := a.o.Limiter.(FreeWaiter)
	w := &waits{a: a, id: o.ID(), fw: fw}
	defer w.close()
	for {
		err := a.tryOrder(ctx, o, deliveries)
		switch {
		case err == nil || msg.IsPermanent(err):
			a.forget(o.ID())
			return err
		case !errors.Is(err, msg.ErrWaiting):
			return err
		case !w.wait(ctx, o, err):
			return a.requeue(o, err)
		}
	}
}

// tryOrder is carryOut with one of the agent's work tokens, so that at
// most Parallel orders are carried out at once while others wait in hand.
func (a *agent) tryOrder(ctx context.Context, o msg.PullOrder, deliveries int) error {
	select {
	case a.work <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.work }()
	return a.carryOut(ctx, o, deliveries)
}

// carryOut is one try at an order: nil when it ended (its outcome recorded
// and published, or nothing left to do), else the error that decides when
// it is tried again.
func (a *agent) carryOut(ctx context.Context, o msg.PullOrder, deliveries int) error {
	log := a.env.Log.With("image", o.Image, "prepullimage", o.Namespace+"/"+o.Name, "node", o.Node, "attempt", o.Attempt)
	tries := a.tries(o.ID(), deliveries)

	st, _, err := a.readStatus(ctx, o.PullTarget)
	if err != nil {
		return msg.Retry(err, backoff(tries, o.Deadline))
	}
	prev, had := st.Image(o.Image)
	had = had && prev.Attempts == o.Attempt
	switch {
	case prev.Attempts > o.Attempt:
		log.InfoContext(ctx, "order superseded by a later attempt; dropped", "recorded_attempt", prev.Attempts)
		return nil
	case had && (prev.Phase == msg.PullPulled || prev.Phase == msg.PullFailed):
		// Carried out and recorded; the acknowledgement was lost.
		log.InfoContext(ctx, "order already carried out; its outcome is published again", "phase", prev.Phase)
		return a.publish(ctx, pulledOf(o, prev, a.env.Replica))
	}
	started, kept, last := time.Now().UTC(), "", ""
	if had {
		last = strings.TrimPrefix(prev.Message, retrying) // why the try before failed, or what it waited for
		if prev.Phase == msg.PullPulling {
			kept = prev.Message // why the try before failed, until this one ends
		}
		if !prev.Started.IsZero() {
			started = prev.Started // the first start of this attempt
		}
	}
	if !time.Now().Before(o.Deadline) {
		return a.finish(ctx, o, started, result{err: pastDeadline(o, nil, last)}, log)
	}
	pctx, cancel := context.WithDeadline(ctx, o.Deadline)
	defer cancel()
	// An image the runtime has is reported present: no slot, no pull.
	img, ok, err := a.o.Runtime.Status(pctx, o.Image)
	switch {
	case err != nil && cri.IsPermanent(err):
		return a.finish(ctx, o, started, result{err: err}, log)
	case err != nil:
		return a.failedTry(ctx, o, started, err, tries, last, log)
	case ok:
		return a.finish(ctx, o, started, result{outcome: msg.PullOutcomePresent, image: img, ref: img.ID}, log)
	}
	lctx, release, err := a.o.Limiter.Acquire(pctx, o)
	switch {
	case err != nil && errors.Is(err, msg.ErrWaiting):
		return a.queue(ctx, o, prev, had, err, log)
	case err != nil && (msg.IsPermanent(err) || cri.IsPermanent(err)):
		return a.finish(ctx, o, started, result{err: err}, log)
	case err != nil:
		return a.failedTry(ctx, o, started, err, tries, last, log)
	}
	defer release()
	a.started(o.ID())
	if !had || prev.Started.IsZero() {
		started = time.Now().UTC() // the pull begins now, its slots held
	}
	if err := a.record(lctx, o.PullTarget, msg.ImagePull{Image: o.Image, Phase: msg.PullPulling, Attempts: o.Attempt, Started: started, Message: kept}); err != nil {
		return a.failedTry(ctx, o, started, a.lost(lctx, pctx, err), tries, last, log)
	}
	a.metrics.active.Inc()
	res := a.pull(lctx, o)
	a.metrics.active.Dec()
	if res.err != nil && !cri.IsPermanent(res.err) {
		return a.failedTry(ctx, o, started, a.lost(lctx, pctx, res.err), tries, last, log)
	}
	return a.finish(ctx, o, started, res, log)
}

// lost names the cause when err came from lctx (the limiter's context)
// being cancelled while pctx (the order's) was not: a slot was lost.
func (a *agent) lost(lctx, pctx context.Context, err error) error {
	if lctx.Err() == nil || pctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w (%v)", context.Cause(lctx), err)
}

// pull pulls the order's image with the keyring of its pull secrets.
func (a *agent) pull(ctx context.Context, o msg.PullOrder) result {
	kr, problems, err := a.keyring(ctx, o)
	if err != nil {
		return result{err: err}
	}
	ref, err := a.pullWithKeyring(ctx, o, kr)
	if err != nil {
		if len(problems) > 0 {
			err = fmt.Errorf("%w; %s", err, strings.Join(problems, "; "))
		}
		return result{err: err, problems: problems}
	}
	res := result{outcome: msg.PullOutcomePulled, ref: ref, problems: problems}
	// The size and digest, for the outcome; the pull stands without them.
	if img, ok, err := a.o.Runtime.Status(ctx, o.Image); err == nil && ok {
		res.image = img
	}
	return res
}

// failedTry handles a failure worth retrying: interrupted by the shutdown,
// it is left to bus; past the order's deadline it ends the order as
// failed; otherwise the order is retried after a growing delay, the
// status saying why (last: see pastDeadline).
func (a *agent) failedTry(ctx context.Context, o msg.PullOrder, started time.Time, err error, tries int, last string, log *slog.Logger) error {
	if ctx.Err() != nil {
		return err
	}
	if !time.Now().Before(o.Deadline) {
		return a.finish(ctx, o, started, result{err: pastDeadline(o, err, last)}, log)
	}
	a.metrics.retries.Inc()
	p := msg.ImagePull{Image: o.Image, Phase: msg.PullPulling, Attempts: o.Attempt, Started: started, Message: retrying + err.Error()}
	if rerr := a.record(ctx, o.PullTarget, p); rerr != nil {
		log.WarnContext(ctx, "recording the retry failed", "err", rerr)
	}
	return msg.Retry(err, backoff(tries, o.Deadline))
}

// pastDeadline is the error of an order whose deadline passed. cause ended
// the try (nil: no try began); last is why the try before failed, or what
// it waited for, named when cause says no more than that the deadline cut
// the try short.
func pastDeadline(o msg.PullOrder, cause error, last string) error {
	at := o.Deadline.UTC().Format(time.RFC3339)
	err := fmt.Errorf("the deadline %s passed before the pull could begin", at)
	if cause != nil {
		err = fmt.Errorf("the deadline %s passed: %w", at, cause)
	}
	if last != "" && (cause == nil || errors.Is(cause, context.DeadlineExceeded)) {
		err = fmt.Errorf("%w; the last try: %s", err, last)
	}
	return err
}

// retrying starts the status message of an order that failed in a way
// worth retrying and is tried again.
const retrying = "retrying: "

// backoff is the delay before the next delivery: a second, doubling with
// every try up to retryMax, and never past the deadline, so that an
// order out of time is failed then.
func backoff(tries int, deadline time.Time) time.Duration {
	d := retryMin << min(max(tries-1, 0), 5)
	d = min(d, retryMax)
	if left := time.Until(deadline); left < d {
		d = max(left, 10*time.Millisecond)
	}
	return d
}

// finish records the outcome in the node's status, then publishes it,
// then counts it. A step that fails is retried with the order: the status
// then says whether the pull happened.
func (a *agent) finish(ctx context.Context, o msg.PullOrder, started time.Time, res result, log *slog.Logger) error {
	now := time.Now().UTC()
	p := msg.ImagePull{Image: o.Image, Phase: msg.PullPulled, Attempts: o.Attempt, Started: started, Finished: now,
		Present: res.outcome == msg.PullOutcomePresent, ImageRef: res.ref, Digest: digestOf(o.Image, res.image), Size: res.image.Size,
		Problems: res.problems}
	if res.err != nil {
		p.Phase, p.Message, res.outcome = msg.PullFailed, res.err.Error(), msg.PullOutcomeFailed
	}
	if err := a.record(ctx, o.PullTarget, p); err != nil {
		return err
	}
	took := now.Sub(started)
	a.metrics.pulls.WithLabelValues(res.outcome).Inc()
	a.metrics.duration.WithLabelValues(res.outcome).Observe(took.Seconds())
	switch res.outcome {
	case msg.PullOutcomeFailed:
		log.ErrorContext(ctx, "pull failed", "err", res.err, "took", took)
	case msg.PullOutcomePulled:
		a.metrics.bytes.Add(float64(p.Size))
		log.InfoContext(ctx, "image pulled", "image_ref", p.ImageRef, "size", p.Size, "took", took, "problems", p.Problems)
	default:
		log.InfoContext(ctx, "image already present", "image_ref", p.ImageRef)
	}
	return a.publish(ctx, pulledOf(o, p, a.env.Replica))
}

func (a *agent) publish(ctx context.Context, p msg.Pulled) error {
	if _, err := bus.Publish(ctx, a.env.JS, msg.PulledSubject(p.Node), p.ID(), p); err != nil {
		return err
	}
	return nil
}

// pulledOf is the outcome message of o as p records it.
func pulledOf(o msg.PullOrder, p msg.ImagePull, agent string) msg.Pulled {
	out := msg.Pulled{PullTarget: o.PullTarget, Outcome: msg.PullOutcomePulled, ImageRef: p.ImageRef, Digest: p.Digest, Size: p.Size,
		Duration: p.Finished.Sub(p.Started), Problems: p.Problems, Agent: agent, At: p.Finished}
	switch {
	case p.Phase == msg.PullFailed:
		out.Outcome, out.Error = msg.PullOutcomeFailed, p.Message
	case p.Present:
		out.Outcome = msg.PullOutcomePresent
	}
	return out
}

// digestOf picks, among the runtime's references by digest of img, the
// one of image's repository.
func digestOf(image string, img cri.Image) string {
	want, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	for _, d := range img.RepoDigests {
		if got, err := reference.ParseNormalizedNamed(d); err == nil && got.Name() == want.Name() {
			return d
		}
	}
	return ""
}

func (a *agent) begin(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inFlight[id] {
		return false
	}
	a.inFlight[id] = true
	return true
}

func (a *agent) end(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.inFlight, id)
}
