package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// Publisher is the part of jetstream.JetStream that publishing needs.
type Publisher interface {
	PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Publish encodes m, sets its schema header, Nats-Msg-Id (when id is not
// empty) and trace context from ctx, and publishes it to a stream subject
// with opts (expectations the stream checks). A message the stream already
// had (its id within the duplicate window) is acknowledged as a duplicate:
// Publish returns that ack without error, since a fact published twice is
// one fact; PublishNew does not. A message whose id another publish is
// storing at that moment (replicas publishing the same fact together) is
// published again shortly, until the stream stores it or calls it a
// duplicate.
func Publish[T msg.Message](ctx context.Context, p Publisher, subject, id string, m T, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	out, err := msg.NewMsg(subject, id, m)
	if err != nil {
		return nil, err
	}
	telemetry.Inject(ctx, out.Header)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		ack, err := p.PublishMsg(ctx, out, opts...)
		if err == nil {
			return ack, nil
		}
		if !msg.IsDuplicateInProcess(err) || id == "" {
			return nil, fmt.Errorf("publish %s: %w", subject, err)
		}
		if pause.For(ctx, delay) != nil {
			return nil, fmt.Errorf("publish %s: %w", subject, err)
		}
	}
}

// ErrDuplicate: the stream already held a message with this id, so the
// message was dropped.
var ErrDuplicate = errors.New("bus: duplicate message id; not stored")

// PublishNew is Publish for a message that must be new: one whose id the
// stream already holds (an id reused for different content, such as a
// version number handed out twice) is ErrDuplicate instead of being
// silently dropped.
func PublishNew[T msg.Message](ctx context.Context, p Publisher, subject, id string, m T, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := Publish(ctx, p, subject, id, m, opts...)
	if err != nil {
		return nil, err
	}
	if ack.Duplicate {
		return ack, fmt.Errorf("publish %s id %s: %w", subject, id, ErrDuplicate)
	}
	return ack, nil
}

// Options configure Consume and Serve.
type Options struct {
	Service string // "renderer": names metrics, spans and the DLQ subject
	Stage   string // "changes": what this handler consumes
	Log     *slog.Logger
	Tracer  trace.Tracer
	Metrics *Metrics
	DLQ     Publisher
	// AckWait of the consumer: a handler still running after a third of it
	// keeps its message alive with InProgress. Zero: 30s.
	AckWait time.Duration
	// Renew, when set, gets the consumer back when Consume finds it lost
	// (deleted, or gone with the NATS node that held it); see Renewal.
	Renew Renewal
	// Health, when set, holds the consumer's state under ConsumerCheck's
	// name: not ready while it is lost or its heartbeats are missing.
	Health HealthSetter
	// Workers is how many requests Serve handles at once (0: one). A
	// request/reply handler with slow and quick requests needs more than
	// one, or a quick request waits for every slow one before it.
	Workers int
}

func (o Options) check() error {
	if o.Service == "" || o.Stage == "" || o.Log == nil || o.Tracer == nil || o.Metrics == nil || o.DLQ == nil {
		return errors.New("bus: options need service, stage, log, tracer, metrics and dlq")
	}
	if o.Workers < 0 {
		return fmt.Errorf("bus: negative workers %d", o.Workers)
	}
	return nil
}

// interruptedRedelivery is how soon a message whose handling the shutdown
// interrupted is delivered again.
const interruptedRedelivery = 500 * time.Millisecond

// Handler handles one JetStream message.
type Handler func(ctx context.Context, m jetstream.Msg) error

// confirmInPlace are the waits after which a message the recorded state
// does not confirm yet (msg.ErrUnconfirmed) is handled again in place,
// before it is left for redelivery: the status write that follows a
// message's publication lands within a millisecond or two, while a
// redelivery costs the NAK's delay and the next pull (5-20 ms).
var confirmInPlace = []time.Duration{time.Millisecond, 2 * time.Millisecond}

// handleConfirming runs h, and again after each of confirmInPlace while it
// returns a retryable ErrUnconfirmed: a handler checks the recorded state
// before it changes anything, so running it again is running it once.
func handleConfirming(ctx context.Context, m jetstream.Msg, h Handler) error {
	err := h(ctx, m)
	for _, wait := range confirmInPlace {
		if !errors.Is(err, msg.ErrUnconfirmed) || msg.IsPermanent(err) {
			return err
		}
		if pause.For(ctx, wait) != nil {
			return err
		}
		err = h(ctx, m)
	}
	return err
}

func handleJS(ctx context.Context, m jetstream.Msg, h Handler, o Options) {
	start := time.Now()
	ctx, span := startSpan(ctx, m.Headers(), m.Subject(), o)
	defer span.End()
	err := withKeepAlive(ctx, m, o.AckWait, func() error { return handleConfirming(ctx, m, h) })
	d := msg.Classify(err)
	if d.Action != msg.Ack && ctx.Err() != nil {
		// The process is stopping: the handler was interrupted, its error
		// is no verdict on the message. It is handled again, by this
		// process's successor or another replica, shortly: the short
		// delay lets the stopped iterator's unsubscribe reach the server
		// first (nats.go sends it from another goroutine), or the server
		// could hand the message straight back to this process's pull
		// request, where nobody takes it until AckWait runs out.
		o.Log.InfoContext(ctx, "handling interrupted by the shutdown; left for redelivery", "stage", o.Stage, "subject", m.Subject(), "err", err)
		d = msg.Decision{Action: msg.Nak, Delay: interruptedRedelivery, Reason: "interrupted by the shutdown"}
	}
	var settleErr error
	switch d.Action {
	case msg.Ack:
		settleErr = m.Ack()
	case msg.Nak:
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, msg.ErrUnconfirmed):
			// The recorded state is written just after the message: no
			// failure while it is on its way (it is dead-lettered if it
			// never comes).
			o.Log.DebugContext(ctx, "waiting for the recorded state to confirm the message", "stage", o.Stage, "subject", m.Subject(), "err", err, "retry_in", d.Delay)
		case errors.Is(err, msg.ErrWaiting):
			// Queued behind a full limit: no failure, and frequent.
			o.Log.DebugContext(ctx, "waiting for capacity; will retry", "stage", o.Stage, "subject", m.Subject(), "err", err, "retry_in", d.Delay)
		case errors.Is(err, msg.ErrBusy):
			// Another replica is doing the work: no failure.
			o.Log.InfoContext(ctx, "held by another replica; will retry", "stage", o.Stage, "subject", m.Subject(), "err", err, "retry_in", d.Delay)
		default:
			o.Log.WarnContext(ctx, "handling failed; will retry", "stage", o.Stage, "subject", m.Subject(), "err", err, "retry_in", d.Delay)
		}
		settleErr = m.NakWithDelay(d.Delay)
	case msg.Term:
		dl := msg.DeadLetter{Service: o.Service, Subject: m.Subject(), Reason: d.Reason, Size: len(m.Data()), At: time.Now().UTC()}
		id := ""
		if meta, merr := m.Metadata(); merr == nil {
			dl.Stream, dl.Sequence = meta.Stream, meta.Sequence.Stream
			id = o.Service + "." + meta.Stream + "." + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
		deadLetter(ctx, dl, m.Data(), m.Headers(), id, o)
		settleErr = m.TermWithReason(truncate(d.Reason, 200))
	}
	if settleErr != nil {
		o.Log.WarnContext(ctx, "settling message failed", "stage", o.Stage, "err", settleErr)
	}
	finish(span, o, d, err, time.Since(start))
}

// CoreHandler handles one core NATS message (requests and triggers).
type CoreHandler func(ctx context.Context, m *nats.Msg) error

// Serve subscribes to subject in queue group queue (empty: every replica
// gets every message) and runs h for each message until ctx is done. A
// permanent error is dead-lettered; others are logged (core messages are not
// redelivered: the sender retries). With o.Workers above one, that many
// messages are handled at once, in no particular order.
func Serve(ctx context.Context, nc *nats.Conn, subject, queue string, h CoreHandler, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanQueueSubscribe(subject, queue, ch)
	if err != nil {
		return fmt.Errorf("%s: subscribe %s: %w", o.Service, subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for range max(o.Workers, 1) {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-ch:
					handleCore(ctx, m, h, o)
				}
			}
		})
	}
	<-ctx.Done()
	return nil
}

func handleCore(ctx context.Context, m *nats.Msg, h CoreHandler, o Options) {
	start := time.Now()
	ctx, span := startSpan(ctx, m.Header, m.Subject, o)
	defer span.End()
	err := h(ctx, m)
	d := msg.Classify(err)
	if d.Action != msg.Ack && ctx.Err() != nil {
		// Interrupted by the shutdown: no verdict (the sender retries).
		o.Log.InfoContext(ctx, "handling interrupted by the shutdown", "stage", o.Stage, "subject", m.Subject, "err", err)
		d = msg.Decision{Action: msg.Nak, Reason: "interrupted by the shutdown"}
	}
	switch d.Action {
	case msg.Term:
		dl := msg.DeadLetter{Service: o.Service, Subject: m.Subject, Reason: d.Reason, Size: len(m.Data), At: time.Now().UTC()}
		deadLetter(ctx, dl, m.Data, m.Header, "", o)
	case msg.Nak:
		if ctx.Err() == nil {
			o.Log.WarnContext(ctx, "handling failed", "stage", o.Stage, "subject", m.Subject, "err", err)
		}
	}
	finish(span, o, d, err, time.Since(start))
}

func startSpan(ctx context.Context, h nats.Header, subject string, o Options) (context.Context, trace.Span) {
	ctx = telemetry.Extract(ctx, h)
	return o.Tracer.Start(ctx, o.Service+" "+o.Stage, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject)))
}

func finish(span trace.Span, o Options, d msg.Decision, err error, took time.Duration) {
	o.Metrics.messages.WithLabelValues(o.Stage, d.Action.String()).Inc()
	o.Metrics.duration.WithLabelValues(o.Stage).Observe(took.Seconds())
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, truncate(err.Error(), 200))
	}
}

func deadLetter(ctx context.Context, dl msg.DeadLetter, data []byte, h nats.Header, id string, o Options) {
	o.Metrics.deadLetters.WithLabelValues(o.Stage).Inc()
	o.Log.ErrorContext(ctx, "message dead-lettered", "stage", o.Stage, "subject", dl.Subject, "reason", dl.Reason)
	if len(data) > msg.DeadLetterPayloadMax {
		data = data[:msg.DeadLetterPayloadMax]
	}
	dl.Payload = data
	if len(h) > 0 {
		dl.Headers = map[string]string{}
		for k := range h {
			dl.Headers[k] = h.Get(k)
		}
	}
	if _, err := Publish(ctx, o.DLQ, msg.DLQSubject(o.Service), id, dl); err != nil {
		o.Log.ErrorContext(ctx, "dead-letter publish failed", "stage", o.Stage, "err", err)
	}
}

// withKeepAlive runs f, sending InProgress for m every third of ackWait
// while f runs.
func withKeepAlive(ctx context.Context, m jetstream.Msg, ackWait time.Duration, f func() error) error {
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	err := f()
	close(done)
	<-stopped
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
