package agent

import (
	"context"

	"github.com/weftio/weft/pkg/msg"
)

// Limiter bounds how many pulls run at once (cluster-wide, per node, per
// registry host). The agent calls Acquire before it pulls an order's image
// and the release it returns once the pull ended; an Acquire that fails
// (ctx done, no slot before the order's deadline) leaves the order to be
// retried. The limits held in NATS KV (pkg/svc/slots) plug in here; until
// then the agent runs with NoLimit.
type Limiter interface {
	Acquire(ctx context.Context, order msg.PullOrder) (release func(), err error)
}

// NoLimit lets every pull run at once.
type NoLimit struct{}

// Acquire returns at once.
func (NoLimit) Acquire(context.Context, msg.PullOrder) (func(), error) { return func() {}, nil }
