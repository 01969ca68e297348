package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// Source is one subject of one stream the timeline reads.
type Source struct {
	Stream, Subject string
}

// Sources are the stream subjects of the timeline; with a target, its
// renders, verdicts, deploy orders and outcomes only (changes, sync
// markers and dead letters are read whole and filtered by Filter).
func Sources(target string) []Source {
	render, validated, deploy, deployed := msg.RenderAll, msg.ValidatedAll, msg.DeployAll, msg.DeployedAll
	if target != "" {
		render, validated = msg.RenderSubject(target), msg.ValidatedSubject(target)
		deploy, deployed = msg.DeploySubject(target, "*"), msg.DeployedSubject(target, "*")
	}
	return []Source{
		{msg.StreamChanges, msg.ChangeAll},
		{msg.StreamChanges, msg.SyncAll},
		{msg.StreamRenders, render},
		{msg.StreamValidated, validated},
		{msg.StreamDeploys, deploy},
		{msg.StreamDeploys, deployed},
		{msg.StreamDLQ, msg.DLQAll},
	}
}

// Conn is what a Feed reads with: the NATS connection and its JetStream
// contexts (the legacy one makes ordered push consumers, which need no
// acknowledgement and no consumer of a known name).
type Conn struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Legacy nats.JetStreamContext
}

// NewConn makes a Conn of nc.
func NewConn(nc *nats.Conn) (Conn, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return Conn{}, err
	}
	legacy, err := nc.JetStream()
	if err != nil {
		return Conn{}, err
	}
	return Conn{NC: nc, JS: js, Legacy: legacy}, nil
}

// Feed reads sources from a point in time: History returns what the
// streams held when it was opened, in time order; with follow, Next then
// returns what arrives after, and the triggers sent meanwhile.
type Feed struct {
	conn    Conn
	follow  bool
	readers []*reader
	subs    []*nats.Subscription
	live    chan Event
	done    chan struct{}
	once    sync.Once
}

// reader is one source being read: its events up to the last message the
// stream held at the start (last), then, when following, live ones.
type reader struct {
	src       Source
	last      uint64 // 0: nothing to read in the history
	mu        sync.Mutex
	history   []Event
	delivered uint64
	caught    chan struct{}
	caughtUp  bool
}

func (r *reader) markCaught() {
	if !r.caughtUp {
		r.caughtUp = true
		close(r.caught)
	}
}

// ErrStreamMissing reports a stream of the timeline that does not exist
// (nothing was provisioned at that NATS server).
var ErrStreamMissing = errors.New("stream not found")

// Open starts reading sources from since (zero: from the start of each
// stream). Close it when done: its consumers are deleted then.
func Open(ctx context.Context, c Conn, sources []Source, since time.Time, follow bool) (*Feed, error) {
	f := &Feed{conn: c, follow: follow, live: make(chan Event, 256), done: make(chan struct{})}
	for _, src := range sources {
		r := &reader{src: src, caught: make(chan struct{})}
		last, err := lastSince(ctx, c.JS, src, since)
		if err != nil {
			f.Close()
			return nil, err
		}
		r.last = last
		f.readers = append(f.readers, r)
		if last == 0 {
			r.markCaught()
			if !follow {
				continue
			}
		}
		if err := f.subscribe(r, since); err != nil {
			f.Close()
			return nil, err
		}
	}
	if follow {
		sub, err := c.NC.Subscribe(msg.TriggerAll, func(m *nats.Msg) {
			f.send(Decode(m.Subject, "", 0, time.Now(), m.Header, m.Data))
		})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("subscribe %s: %w", msg.TriggerAll, err)
		}
		f.subs = append(f.subs, sub)
	}
	return f, nil
}

// lastSince is the sequence of the last message of src, or 0 when there
// is none at or after since.
func lastSince(ctx context.Context, js jetstream.JetStream, src Source, since time.Time) (uint64, error) {
	stream, err := js.Stream(ctx, src.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("%w: %s (was weft ever started on this NATS server?)", ErrStreamMissing, src.Stream)
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", src.Stream, err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, src.Subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: last message of %s: %w", src.Stream, src.Subject, err)
	}
	if m.Time.Before(since) {
		return 0, nil
	}
	return m.Sequence, nil
}

func (f *Feed) subscribe(r *reader, since time.Time) error {
	opts := []nats.SubOpt{nats.BindStream(r.src.Stream), nats.OrderedConsumer(), nats.DeliverAll()}
	if !since.IsZero() {
		opts = []nats.SubOpt{nats.BindStream(r.src.Stream), nats.OrderedConsumer(), nats.StartTime(since)}
	}
	sub, err := f.conn.Legacy.Subscribe(r.src.Subject, func(m *nats.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return // a flow control or heartbeat message
		}
		e := Decode(m.Subject, r.src.Stream, meta.Sequence.Stream, meta.Timestamp, m.Header, m.Data)
		r.mu.Lock()
		r.delivered = meta.Sequence.Stream
		if !r.caughtUp && meta.Sequence.Stream <= r.last {
			r.history = append(r.history, e)
			if meta.Sequence.Stream == r.last || meta.NumPending == 0 {
				r.markCaught()
			}
			r.mu.Unlock()
			return
		}
		r.markCaught()
		r.mu.Unlock()
		if f.follow {
			f.send(e)
		}
	}, opts...)
	if err != nil {
		return fmt.Errorf("read %s of %s: %w", r.src.Subject, r.src.Stream, err)
	}
	f.subs = append(f.subs, sub)
	return nil
}

func (f *Feed) send(e Event) {
	select {
	case f.live <- e:
	case <-f.done:
	}
}

// History waits until every source is read up to what its stream held
// when the feed was opened and returns those events in time order.
func (f *Feed) History(ctx context.Context) ([]Event, error) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for _, r := range f.readers {
		for waiting := true; waiting; {
			select {
			case <-r.caught:
				waiting = false
			case <-ctx.Done():
				return nil, fmt.Errorf("reading %s of %s: %w", r.src.Subject, r.src.Stream, ctx.Err())
			case <-tick.C:
				// The last message may have aged out since: then what is
				// left was delivered.
				last, err := lastSince(ctx, f.conn.JS, r.src, time.Time{})
				if err != nil {
					return nil, err
				}
				r.mu.Lock()
				if last == 0 || last <= r.delivered {
					r.markCaught()
				}
				r.mu.Unlock()
			}
		}
	}
	var out []Event
	for _, r := range f.readers {
		r.mu.Lock()
		out = append(out, r.history...)
		r.history = nil
		r.mu.Unlock()
	}
	slices.SortStableFunc(out, func(a, b Event) int {
		switch {
		case Before(a, b):
			return -1
		case Before(b, a):
			return 1
		}
		return 0
	})
	return out, nil
}

// Next returns the next event that arrived after the history (follow).
func (f *Feed) Next(ctx context.Context) (Event, error) {
	select {
	case e := <-f.live:
		return e, nil
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Close stops reading and deletes the feed's consumers.
func (f *Feed) Close() {
	f.once.Do(func() {
		close(f.done)
		for _, s := range f.subs {
			_ = s.Unsubscribe()
		}
	})
}
