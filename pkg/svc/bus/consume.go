package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/pause"
)

// MessageSource is the part of jetstream.Consumer that Consume needs.
type MessageSource interface {
	Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error)
}

// Renewal gets a consumer back after Consume found it lost: it returns the
// consumer to read from now. after is the stream sequence of the last
// message handled (0: none), so a consumer created anew starts after it
// rather than where its configuration says.
type Renewal func(ctx context.Context, after uint64) (MessageSource, error)

// HealthSetter records a named readiness check (health.Checks).
type HealthSetter interface {
	Set(name string, err error)
	Remove(name string)
}

// ConsumerCheck names the readiness check of a service's consumer: by the
// consumer's name where it has one, else by the stage it serves.
func ConsumerCheck(service, consumer string) string { return "consumer " + service + " " + consumer }

// consumerName is cons's name, or "" for a source that does not say.
func consumerName(cons MessageSource) string {
	if c, ok := cons.(interface {
		CachedInfo() *jetstream.ConsumerInfo
	}); ok {
		if info := c.CachedInfo(); info != nil {
			return info.Name
		}
	}
	return ""
}

// ErrNoHeartbeat is the state of a consumer whose heartbeats stopped: the
// NATS node serving it is gone or cut off.
var ErrNoHeartbeat = errors.New("no heartbeat from the consumer")

// Heartbeats of a consumer's pull requests: a consumer silent for two of
// them is checked, and renewed when lost.
const (
	pullHeartbeat = 2 * time.Second
	pullExpiry    = 10 * time.Second
)

// Consume runs h over every message of cons, one at a time, until ctx is
// done, then stops and returns nil.
//
// A consumer that is deleted or stops sending heartbeats (its NATS node
// died) is reported on o.Health and, with o.Renew, got back: renewed until
// that succeeds, then read again, starting after the last message handled.
// Without o.Renew a lost consumer is an error returned to the caller.
func Consume(ctx context.Context, cons MessageSource, h Handler, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	name := consumerName(cons)
	if name == "" {
		name = o.Stage
	}
	check := ConsumerCheck(o.Service, name)
	if o.Health != nil {
		defer o.Health.Remove(check)
	}
	state := func(err error) {
		if o.Health != nil {
			o.Health.Set(check, err)
		}
	}
	var last uint64
	for {
		err := consumeUntilLost(ctx, cons, h, o, &last, state)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		state(err)
		if o.Renew == nil {
			return fmt.Errorf("%s %s: %w", o.Service, o.Stage, err)
		}
		// A warning: renewing is the repair; a renewal that keeps failing
		// is logged on every try, and /readyz says not ready meanwhile.
		o.Log.WarnContext(ctx, "consumer lost; renewing it", "stage", o.Stage, "err", err, "after_sequence", last)
		if cons, err = renew(ctx, o, last); err != nil {
			return nil // ctx done
		}
		o.Log.InfoContext(ctx, "consumer renewed", "stage", o.Stage, "after_sequence", last)
	}
}

// consumeUntilLost reads cons until ctx is done (nil) or the consumer is
// lost (the reason).
func consumeUntilLost(ctx context.Context, cons MessageSource, h Handler, o Options, last *uint64, state func(error)) error {
	it, err := cons.Messages(jetstream.PullHeartbeat(pullHeartbeat), jetstream.PullExpiry(pullExpiry),
		jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	state(nil)
	silent := false
	for {
		m, err := it.Next()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			// The node serving it may be gone for good; a consumer that
			// still exists (its leader moved) answers the renewal.
			state(ErrNoHeartbeat)
			if !silent {
				o.Log.WarnContext(ctx, "no heartbeat from the consumer", "stage", o.Stage)
			}
			silent = true
			if o.Renew != nil {
				return ErrNoHeartbeat
			}
			if err := exists(ctx, cons); err != nil {
				return err
			}
			continue
		default:
			// Deleted, closed under us, or refused: none comes back alone.
			return err
		}
		if silent {
			silent = false
			state(nil)
		}
		if meta, merr := m.Metadata(); merr == nil {
			*last = max(*last, meta.Sequence.Stream)
		}
		handleJS(ctx, m, h, o)
	}
}

// exists reports a consumer the server no longer has; a consumer it cannot
// ask about is taken to exist.
func exists(ctx context.Context, cons MessageSource) error {
	c, ok := cons.(interface {
		Info(ctx context.Context) (*jetstream.ConsumerInfo, error)
	})
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	return nil
}

// renew calls o.Renew until it succeeds or ctx is done.
func renew(ctx context.Context, o Options, after uint64) (MessageSource, error) {
	delay := 100 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err := o.Renew(rctx, after)
		cancel()
		if err == nil {
			return cons, nil
		}
		o.Log.WarnContext(ctx, "renewing consumer failed; will retry", "stage", o.Stage, "err", err, "retry_in", delay)
		if err := pause.For(ctx, delay); err != nil {
			return nil, err
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Durable creates (or updates) the named consumer cfg on stream and returns
// it with the Renewal that gets it back when it is lost. A durable consumer
// has as many replicas as its stream (unless cfg says otherwise), so it
// outlives the NATS node that leads it. A request nobody answers (a NATS
// node down, leaders being elected) is asked again until ctx is done.
func Durable(ctx context.Context, js ConsumerMaker, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, Renewal, error) {
	renew, err := Renew(js, stream, cfg)
	if err != nil {
		return nil, nil, err
	}
	var c jetstream.Consumer
	err = msg.Open(ctx, "consumer "+cfg.Durable+cfg.Name+" on "+stream, func(ctx context.Context) (err error) {
		c, err = js.CreateOrUpdateConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return c, renew, nil
}

// errWorkQueueDeliverAll is JetStream's refusal of a consumer of a
// work-queue stream that would not deliver all its messages.
const errWorkQueueDeliverAll jetstream.ErrorCode = 10101

func isWorkQueueDeliverAll(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errWorkQueueDeliverAll
}

// ConsumerMaker is the part of jetstream.JetStream that Renew needs.
type ConsumerMaker interface {
	Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error)
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

// Renew is the Renewal of a named consumer (cfg.Durable or cfg.Name): one
// that still exists (its leader moved, or heartbeats were only late) is
// read again as it is; one that is gone is created with cfg, starting
// after the last message handled (on a work-queue stream, which holds only
// messages not acknowledged yet, with cfg as it is).
func Renew(js ConsumerMaker, stream string, cfg jetstream.ConsumerConfig) (Renewal, error) {
	name := cfg.Durable
	if name == "" {
		name = cfg.Name
	}
	if name == "" {
		return nil, errors.New("bus: a renewed consumer needs a name")
	}
	return func(ctx context.Context, after uint64) (MessageSource, error) {
		c, err := js.Consumer(ctx, stream, name)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("consumer %s: %w", name, err)
		}
		again := cfg
		if after > 0 {
			again.DeliverPolicy, again.OptStartSeq, again.OptStartTime = jetstream.DeliverByStartSequencePolicy, after+1, nil
		}
		c, err = js.CreateOrUpdateConsumer(ctx, stream, again)
		if after > 0 && isWorkQueueDeliverAll(err) {
			// A work queue keeps only what no consumer acknowledged, and
			// its consumers deliver all of it: made as configured, the
			// consumer starts after the last message handled.
			c, err = js.CreateOrUpdateConsumer(ctx, stream, cfg)
		}
		if err != nil {
			return nil, fmt.Errorf("create consumer %s: %w", name, err)
		}
		return c, nil
	}, nil
}
