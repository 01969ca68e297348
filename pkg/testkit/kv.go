package testkit

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LostAnswers is a key-value bucket whose next Lose writes (Create and
// Update) go unanswered, as when the NATS node that took one is lost
// before it answers: each lands on the bucket when Land is set, and
// answers nats.ErrTimeout. A write the bucket refuses is answered with the
// refusal and not counted; writes past Lose pass through.
type LostAnswers struct {
	jetstream.KeyValue
	Land bool

	mu   sync.Mutex
	Lose int // writes still to lose
}

func (l *LostAnswers) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return l.write(func() (uint64, error) { return l.KeyValue.Create(ctx, key, value, opts...) })
}

func (l *LostAnswers) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return l.write(func() (uint64, error) { return l.KeyValue.Update(ctx, key, value, rev) })
}

// Left is the number of writes still to lose.
func (l *LostAnswers) Left() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Lose
}

func (l *LostAnswers) write(w func() (uint64, error)) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Lose <= 0 {
		return w()
	}
	if l.Land {
		if _, err := w(); err != nil {
			return 0, err
		}
	}
	l.Lose--
	return 0, nats.ErrTimeout
}
