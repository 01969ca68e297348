// Package relay announces every write to the resources bucket as a change
// message. It follows the bucket's stream with the durable consumer
// "watcher-relay", shared by all watcher replicas, so each write is handled
// by one replica at least once; the change carries Nats-Msg-Id
// <key>@<revision>, so a redelivery after a crash publishes nothing twice.
// Because announcing follows the write instead of accompanying it, a writer
// that dies between writing and announcing loses no change. The trace
// context and the initial-listing mark of the write travel on to the
// change message.
package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
)

// ConsumerName is the durable consumer on the resources bucket's stream.
const ConsumerName = "watcher-relay"

// AckWait of the relay's consumer: a write whose watcher died mid-relay is
// relayed by another within it (a live handler keeps its message with
// InProgress).
const AckWait = 5 * time.Second

// Consumer creates (or updates) the relay's durable consumer, and returns
// it with the renewal that gets it back if it is lost.
func Consumer(ctx context.Context, js bus.ConsumerMaker) (jetstream.Consumer, bus.Renewal, error) {
	c, renew, err := bus.Durable(ctx, js, msg.KVStream(msg.BucketResources), jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "announces resource writes as change messages",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	return c, renew, nil
}

// Relay turns bucket writes into change messages.
type Relay struct{ pub bus.Publisher }

// New returns a relay publishing with pub.
func New(pub bus.Publisher) *Relay { return &Relay{pub: pub} }

// Handle announces one write of the bucket's stream.
func (r *Relay) Handle(ctx context.Context, m jetstream.Msg) error {
	key, ok := msg.ResourceKeyOf(m.Subject())
	if !ok {
		return msg.Permanent(fmt.Errorf("not a resource subject: %s", m.Subject()))
	}
	source, typ, ns, name, err := msg.ParseResourceKey(key)
	if err != nil {
		return msg.Permanent(err)
	}
	meta, err := m.Metadata()
	if err != nil {
		return msg.Permanent(fmt.Errorf("no metadata: %w", err))
	}
	c := msg.Change{Source: source, Type: typ, Key: key, Namespace: ns, Name: name, Revision: meta.Sequence.Stream, ObservedAt: meta.Timestamp.UTC()}
	switch m.Headers().Get(msg.HeaderKVOperation) {
	case msg.KVOpDelete, msg.KVOpPurge:
		c.Op = msg.OpDelete
	default:
		var res msg.Resource
		if err := msg.Decode(m.Data(), &res); err != nil {
			return err
		}
		c.Op, c.Hash, c.ResourceVersion = msg.OpPut, res.Hash, res.ResourceVersion
	}
	c.Initial = m.Headers().Get(msg.HeaderInitial) == "true"
	if _, err := bus.Publish(ctx, r.pub, msg.ChangeSubject(source, typ), msg.ChangeID(key, c.Revision), c); err != nil {
		return msg.Retry(err, time.Second)
	}
	return nil
}
