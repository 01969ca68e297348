package msg

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Decoding errors. Each is permanent: redelivery cannot fix the payload.
var (
	// ErrMalformed: the payload is not a JSON object of the expected type.
	ErrMalformed = errors.New("malformed message")
	// ErrUnknownVersion: the schema's major version is not one this build reads.
	ErrUnknownVersion = errors.New("unknown schema version")
	// ErrTooLarge: the payload exceeds MaxPayload.
	ErrTooLarge = errors.New("message too large")
	// ErrInvalid: the payload decoded but a field is missing or out of range.
	ErrInvalid = errors.New("invalid message")
)

// permanent marks an error that no retry can fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as one that must not be retried: the message is
// terminated and dead-lettered with err as the reason.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// transient marks an error worth retrying after a delay.
type transient struct {
	err   error
	delay time.Duration
}

func (t transient) Error() string { return t.err.Error() }
func (t transient) Unwrap() error { return t.err }

// Retry marks err as transient: the message is redelivered after delay.
func Retry(err error, delay time.Duration) error {
	if err == nil {
		return nil
	}
	return transient{err: err, delay: delay}
}

// IsPermanent reports whether err (or any error it wraps) is permanent,
// which includes every decoding error.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownVersion) ||
		errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalid)
}

// Action is what a consumer does with a message after its handler returned.
type Action int

const (
	// Ack: handled (or nothing to do).
	Ack Action = iota
	// Nak: redeliver after Decision.Delay.
	Nak
	// Term: never redeliver; publish a DeadLetter with the reason.
	Term
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Nak:
		return "nak"
	case Term:
		return "term"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Decision is the ack decision for one handled message.
type Decision struct {
	Action Action
	Delay  time.Duration // for Nak
	Reason string        // for Nak and Term: the error text
}

// DefaultRetryDelay is the redelivery delay of an error not marked otherwise.
const DefaultRetryDelay = 2 * time.Second

// Classify maps a handler's error to an ack decision: nil acks; permanent
// errors (Permanent, decoding errors) terminate and dead-letter; Retry errors
// nak with their delay; anything else naks with DefaultRetryDelay, because
// an unclassified failure (a timeout, a lost connection) is usually transient.
func Classify(err error) Decision {
	switch {
	case err == nil:
		return Decision{Action: Ack}
	case IsPermanent(err):
		return Decision{Action: Term, Reason: err.Error()}
	}
	var t transient
	if errors.As(err, &t) {
		return Decision{Action: Nak, Delay: t.delay, Reason: err.Error()}
	}
	return Decision{Action: Nak, Delay: DefaultRetryDelay, Reason: err.Error()}
}

// ErrBusy is a message whose work another replica is doing right now (it
// holds the lease on it): the message is delivered again shortly, and is a
// no-op or done by then.
var ErrBusy = errors.New("held by another replica")

// ErrWaiting is a message whose work waits for capacity (every slot of a
// concurrency limit is held by other work): no failure; it is delivered
// again shortly and waits in its queue meanwhile.
var ErrWaiting = errors.New("waiting for capacity")

// ErrUnconfirmed is a message whose version, revision or hash the state it
// refers to does not hold (the status a service writes, the bucket, the
// object store): a forged or corrupted message, or a write still on its
// way. Such a message never orders state; see Unconfirmed.
var ErrUnconfirmed = errors.New("not confirmed by the recorded state")

// ConfirmWait is how long a message the recorded state does not confirm
// yet is retried: long enough for the write that follows its publication
// (a status written right after the message) to land.
const ConfirmWait = 10 * time.Second

// Unconfirmed is the error for a stream message, stored age ago, that the
// recorded state does not confirm (ErrUnconfirmed with the formatted
// detail): retried while younger than ConfirmWait, permanent (dead-lettered)
// after. The delay doubles with the message's age (5ms, 10ms, 20ms, ...):
// the write that normally follows within milliseconds is met a few
// milliseconds later, and a message nothing confirms is dead-lettered
// after about fifteen deliveries (every consumer that can meet such a
// message delivers without limit).
func Unconfirmed(age time.Duration, format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrUnconfirmed, fmt.Sprintf(format, args...))
	if age > ConfirmWait {
		return Permanent(err)
	}
	return Retry(err, min(max(age, unconfirmedFirstRetry), ConfirmWait))
}

// unconfirmedFirstRetry is the shortest wait for the recorded state.
const unconfirmedFirstRetry = 5 * time.Millisecond

// AgeOf is how long ago a stream message was stored, from its metadata (0
// when it has none).
func AgeOf(meta *jetstream.MsgMetadata, err error) time.Duration {
	if err != nil || meta == nil {
		return 0
	}
	return time.Since(meta.Timestamp)
}
