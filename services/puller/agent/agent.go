// Package agent is the puller's node agent (`weft-puller agent --node
// <name>`, one per node, a DaemonSet that mounts the container runtime's
// socket). It takes the pull orders of its node from the work-queue stream
// (msg.PullSubject(node), durable consumer ConsumerName(node)) and carries
// each out through the runtime's CRI ImageService:
//
//   - an image the runtime already has (ImageStatus) is reported present,
//     nothing pulled;
//   - otherwise it is pulled with the credentials of the order's pull
//     secrets, read from the API server by namespace and name and matched
//     to the image's registry as the kubelet matches them; a secret that is
//     missing, unreadable or not a pull secret is named (never shown) in
//     the outcome and the pull goes on with the others, as the kubelet's
//     does;
//   - the outcome is written to the node's msg.PullStatus in
//     msg.BucketPulls (compare-and-set) and then published as a msg.Pulled
//     on msg.PulledSubject(node), with the order's id, so an outcome
//     published twice is stored once.
//
// A failure no retry can fix (the image does not exist, the registry
// refuses the credentials, the reference does not parse) ends the order
// as failed with the registry's or runtime's message: the controller
// decides whether to order another attempt. Any other failure (runtime or
// registry unreachable, rate limited, a status write that did not land)
// is retried: the order is redelivered after a delay that doubles from a
// second up to 30 s, until its deadline, after which it is failed with the
// last error. Each order is pulled within its deadline, kept alive with
// InProgress while it runs (AckWait is short, so an order whose agent died
// comes back quickly). An order delivered again after its outcome was
// recorded (the agent died before acknowledging it) is not pulled again:
// its recorded outcome is published again and it is acknowledged; one
// older than the attempt the status holds is dropped.
//
// An image the runtime lacks is pulled only once the order holds a slot of
// each of its limits (msg.PullOrder.Limits: in the cluster, on the node,
// from the image's registry host), taken in the leases bucket by
// SlotLimiter, so no number of agents, nor any agent killed at any
// moment, makes more pulls run at once than the limits allow. A full limit
// is no failure: the order waits, its status Pending and saying which
// limit it waits for, counted in weft_puller_agent_queued_pulls. Up to
// Waiting orders wait in the agent's hand (their messages kept alive with
// InProgress, so they keep their place and an agent that dies gives them
// back after AckWait), each woken as soon as a slot of the limit it waits
// for is freed anywhere (slots.Waiter), or after about QueueRetry if no
// free was seen; being woken is only a hint, the slots decide. Orders
// beyond Waiting, and those of a Limiter that cannot wake them, go back
// to wait in the queue, delivered again after about QueueRetry. The slots are
// owned by the order's id, so an agent that takes over the order of one
// that died adopts the slots it left, and slots nobody adopts expire after
// SlotTTL. Metrics are weft_puller_agent_*.
package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/cri"
)

// Service names the agent in logs, spans and its DLQ subject
// (weft.dlq.puller-agent); its metrics are weft_puller_agent_*.
const Service = "puller-agent"

const metricsService = "puller_agent"

// ConsumerName is the durable consumer of node's pull orders.
func ConsumerName(node string) string { return "puller-agent-" + msg.KeyEscape(node) }

// Runtime is the part of the CRI client the agent uses (cri.Client).
type Runtime interface {
	Status(ctx context.Context, ref string) (cri.Image, bool, error)
	Pull(ctx context.Context, ref string, auth *cri.Auth) (string, error)
}

// Defaults of Options.
const (
	DefaultParallel = 2
	DefaultAckWait  = 10 * time.Second
	// retryMin and retryMax bound the delay before a retryable failure is
	// tried again.
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// Options configure Run.
type Options struct {
	Node    string  // the node this agent pulls for (required)
	Runtime Runtime // required
	Secrets Secrets // required
	// Limiter is asked before every pull; nil: SlotLimiter over the
	// leases bucket, with SlotTTL.
	Limiter Limiter
	// SlotTTL is how long a pull slot outlives its holder's last renewal
	// (default slots.DefaultTTL): how soon the slots of an agent that died
	// come back when no agent takes its orders over.
	SlotTTL time.Duration
	// QueueRetry is how soon, on average, an order that found a limit full
	// is looked at again when no freed slot woke it first (default
	// DefaultQueueRetry): the fallback for a free the watch missed, and
	// the delay of orders sent back to the queue to wait.
	QueueRetry time.Duration
	// Parallel is how many orders are carried out at once (default 2).
	Parallel int
	// Waiting is how many orders that found a limit full the agent keeps
	// in hand, woken as soon as a slot of that limit is freed (default
	// 2 x Parallel); the others wait in the queue, looked at again after
	// about QueueRetry.
	Waiting int
	// AckWait of the consumer (default 10 s): how soon an order whose
	// agent died is delivered again.
	AckWait time.Duration
}

func (o *Options) defaults() error {
	if o.Node == "" || o.Runtime == nil || o.Secrets == nil {
		return errors.New("agent: options need node, runtime and secrets")
	}
	if o.SlotTTL == 0 {
		o.SlotTTL = slots.DefaultTTL
	}
	if o.SlotTTL < 0 || o.SlotTTL > msg.LeaseTTL {
		return fmt.Errorf("agent: slot TTL must be in (0, %v], got %v", msg.LeaseTTL, o.SlotTTL)
	}
	if o.QueueRetry == 0 {
		o.QueueRetry = DefaultQueueRetry
	}
	if o.QueueRetry < 0 {
		return fmt.Errorf("agent: queue retry must be positive, got %v", o.QueueRetry)
	}
	if o.Parallel == 0 {
		o.Parallel = DefaultParallel
	}
	if o.Parallel < 1 {
		return fmt.Errorf("agent: parallel must be >= 1, got %d", o.Parallel)
	}
	if o.Waiting == 0 {
		o.Waiting = 2 * o.Parallel
	}
	if o.Waiting < 0 {
		return fmt.Errorf("agent: waiting must not be negative, got %d", o.Waiting)
	}
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.AckWait < 0 {
		return fmt.Errorf("agent: ack wait must be positive, got %v", o.AckWait)
	}
	return nil
}

// Run carries out the node's pull orders until ctx is done.
func Run(ctx context.Context, env svc.Env, o Options) error {
	if err := env.Check(); err != nil {
		return err
	}
	if err := o.defaults(); err != nil {
		return err
	}
	env = env.For(Service)
	kv, err := env.JS.KeyValue(ctx, msg.BucketPulls)
	if err != nil {
		return fmt.Errorf("%s: bucket %s: %w", Service, msg.BucketPulls, err)
	}
	a := &agent{env: env, o: o, kv: kv, inFlight: map[string]bool{}, waiters: map[string]*waiter{},
		work: make(chan struct{}, o.Parallel), room: make(chan struct{}, o.Waiting)}
	if a.metrics, err = newMetrics(env.Registry, a.queued); err != nil {
		return err
	}
	if a.o.Limiter == nil {
		leases, err := env.JS.KeyValue(ctx, msg.BucketLeases)
		if err != nil {
			return fmt.Errorf("%s: bucket %s: %w", Service, msg.BucketLeases, err)
		}
		s, err := slots.New(leases, env.JS, slots.WithTTL(o.SlotTTL), slots.WithObserver(a.metrics.observeSlot), slots.WithLogger(env.Log))
		if err != nil {
			return fmt.Errorf("%s: %w", Service, err)
		}
		a.o.Limiter = SlotLimiter{Slots: s}
	}
	bm, err := bus.NewMetrics(metricsService, env.Registry)
	if err != nil {
		return err
	}
	cons, renew, err := bus.Durable(ctx, env.JS, msg.StreamPulls, jetstream.ConsumerConfig{
		Durable:       ConsumerName(o.Node),
		Description:   "pull orders of node " + o.Node,
		FilterSubject: msg.PullSubject(o.Node),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		// No MaxDeliver: an order ends by its deadline, not by a count.
		MaxDeliver: -1,
		// Orders in hand or waiting for a retry; the loops take one each.
		MaxAckPending: max(4*o.Parallel, o.Parallel+o.Waiting),
	})
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	bo := bus.Options{Service: Service, Stage: "pulls", Log: env.Log, Tracer: env.Tracer.Tracer(Service), Metrics: bm,
		DLQ: env.JS, AckWait: o.AckWait, Renew: renew, Health: env.Health}
	env.Log.Info("taking pull orders", "node", o.Node, "subject", msg.PullSubject(o.Node), "parallel", o.Parallel, "waiting", o.Waiting)
	g, ctx := errgroup.WithContext(ctx)
	// A loop per order carried out or waiting in hand for a slot; a loop
	// carries its order out only with one of the Parallel work tokens.
	for range o.Parallel + o.Waiting {
		g.Go(func() error { return bus.Consume(ctx, cons, a.onOrder, bo) })
	}
	return g.Wait()
}
