// Package relay announces every write to the resources bucket as a change
// message. It follows the bucket's stream with the durable consumer
// "watcher-relay", shared by all watcher replicas, so each write is handled
// by one replica at least once; the change carries Nats-Msg-Id
// <key>@<revision>, so a redelivery after a crash publishes nothing twice.
// Because announcing follows the write instead of accompanying it, a writer
// that dies between writing and announcing loses no change. The trace
// context and the initial-listing mark of the write travel on to the
// change message. The hash and resource version come from the write's
// headers (msg.HeaderResourceHash, msg.HeaderResourceVersion), so the
// value is decoded only for a write made without them.
//
// Workers handlers run at once on the consumer, so that announcing keeps up
// with pipelined writes: change messages of different keys (and, rarely,
// of one key) may be published out of bucket order; each names its
// revision, and readers take the key's last write from the bucket, so
// order does not matter to them. A lost consumer is renewed after the
// lowest sequence any handler has reported, so a write one handler had not
// reached is not skipped.
package relay

import (
	"context"
	"fmt"
	"sync"
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

// Workers is how many handlers consume the relay's consumer at once.
const Workers = 8

// Renewals returns one renewal per worker over renew: each renews after the
// lowest sequence that any worker has renewed after so far, its own
// included.
func Renewals(renew bus.Renewal, n int) []bus.Renewal {
	var (
		mu    sync.Mutex
		after = make([]uint64, n)
		known = make([]bool, n)
	)
	out := make([]bus.Renewal, n)
	for i := range n {
		out[i] = func(ctx context.Context, seq uint64) (bus.MessageSource, error) {
			mu.Lock()
			after[i], known[i] = seq, true
			lowest := seq
			for j := range n {
				if known[j] {
					lowest = min(lowest, after[j])
				}
			}
			mu.Unlock()
			return renew(ctx, lowest)
		}
	}
	return out
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
		c.Op = msg.OpPut
		if h := m.Headers(); h.Get(msg.HeaderResourceHash) != "" {
			c.Hash, c.ResourceVersion = h.Get(msg.HeaderResourceHash), h.Get(msg.HeaderResourceVersion)
			break
		}
		// Written without the headers: read them from the value.
		var res msg.Resource
		if err := msg.Decode(m.Data(), &res); err != nil {
			return err
		}
		c.Hash, c.ResourceVersion = res.Hash, res.ResourceVersion
	}
	c.Initial = m.Headers().Get(msg.HeaderInitial) == "true"
	if _, err := bus.Publish(ctx, r.pub, msg.ChangeSubject(source, typ), msg.ChangeID(key, c.Revision), c); err != nil {
		return msg.Retry(err, time.Second)
	}
	return nil
}
