// Package controller is the puller's controller (`weft-puller controller`):
// it turns PrePullPolicies and the workloads they select into
// PrePullImages, and PrePullImages into pulls, level-based and with no
// informers of its own.
//
// Inputs are the watcher's change messages of the configured Kubernetes
// source (durable consumer ChangesConsumer, shared by every replica, one
// message to one replica) and the node agents' outcomes on weft.pulled.>
// (durable consumer PulledConsumer). A message only names what changed:
// the state is read again from the resources bucket (and the agents'
// weft-pulls bucket), never taken from the message, and one step is taken
// through the API server; the change that step makes brings the next. A
// periodic resync, and a timer per PrePullImage for backoffs and TTLs,
// look again without a change.
//
// Several replicas run at once: every action is idempotent. PrePullImages
// and Jobs have deterministic names (AlreadyExists is done), updates carry
// the resourceVersion read (a conflict is retried on the next look), an
// attempt is claimed in the status before it starts (only the replica
// whose write lands starts it; a claimed attempt whose pull Job is not in
// the resources bucket some seconds later, its replica having died before
// creating it, gets it from the next look: resumeJobs), pull orders carry
// msg.PullTarget.ID as Nats-Msg-Id (replicas publishing one order store
// it once), and the slots of pull Jobs are owned by the Job's name, so
// any replica adopts, renews and frees them.
//
// Workloads (reconcileWorkload): the first valid policy by name selecting
// a workload decides; a workload whose images some eligible node does not
// report in status.images gets the PrePullImage workload.Name names, owned
// by the workload, with a finalizer; a node that becomes eligible later is
// added to it. A policy's status holds its Valid condition and the count
// of workloads it selects.
//
// Pulls (reconcileImage): package pull decides; mode cri publishes one
// msg.PullOrder per image (with the policy's limits) to the node's agent,
// mode job holds one slot of each limit (cluster, node, registry hosts)
// and creates the node's pull Job (package job). Finished attempts free
// slots; a failed attempt's Job is deleted and the attempt retried after
// the backoff.
//
// The slots of a running pull Job outlive the replica that started it:
// every replica keeps them (keepLoop). A pass at start and every third of
// the slot TTL lists the pull Jobs in the resources bucket and holds the
// slots of each one running, adopting them by the Job's name (or taking
// them again when they lapsed: every replica was gone for a TTL), and
// frees the copies it holds of Jobs that ended or left the bucket. So
// the slots of a running Job are renewed while any replica runs, and a
// replica starts no pull Job before its first pass ended: the Jobs
// already running hold their slots before new ones are looked for.
//
// Completed PrePullImages are deleted after the policy's TTL. The
// finalizer deletes the Jobs and the weft-pulls keys of a PrePullImage
// being deleted; the resync deletes weft-pulls keys of PrePullImages that
// are gone (an order carried out after the finalizer).
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/job"
)

// Service names the controller in logs and metrics (weft_puller_...).
const Service = "puller"

// busService names the controller's spans and its dead letters: they go
// to its NATS role's subject, msg.DLQSubject("puller-controller"), the one
// its user may publish to.
const busService = string(msg.RolePullerController)

// Durable consumers of every replica.
const (
	ChangesConsumer = "puller-changes"
	PulledConsumer  = "puller-pulled"
)

// Finalizer holds a PrePullImage until its Jobs and pull status are gone.
const Finalizer = "weft.io/puller"

type controller struct {
	env     svc.Env
	cfg     Config
	objs    objects
	pulls   jetstream.KeyValue
	slots   *slots.Slots
	builder *job.Builder
	metrics *metrics
	wake    *wakeups
	locks   keyLocks
	keeper  *keeper
	// slotWaits wake PrePullImages whose pull Jobs wait for a full limit.
	slotWaits *slotWaits

	mu       sync.Mutex
	held     map[string]heldJob // by Job name
	policies map[string]bool    // policies seen by the last look at all
}

// Run runs the controller until ctx is done.
func Run(ctx context.Context, env svc.Env, cfg Config) error {
	if err := env.Check(); err != nil {
		return err
	}
	if err := cfg.defaults(); err != nil {
		return err
	}
	env = env.For(Service)
	c, err := newController(ctx, env, cfg)
	if err != nil {
		return err
	}
	defer c.releaseAll()
	defer c.slotWaits.close()
	bm, err := bus.NewMetrics(Service, env.Registry)
	if err != nil {
		return err
	}
	changes, renewChanges, err := bus.Durable(ctx, env.JS, msg.StreamChanges, jetstream.ConsumerConfig{
		Durable:        ChangesConsumer,
		Description:    "the puller's inputs: workloads, nodes, namespaces, policies, PrePullImages and pull Jobs",
		FilterSubjects: c.changeSubjects(),
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		MaxDeliver:     -1,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	pulled, renewPulled, err := bus.Durable(ctx, env.JS, msg.StreamPulled, jetstream.ConsumerConfig{
		Durable:       PulledConsumer,
		Description:   "outcomes of the node agents' pulls",
		FilterSubject: msg.PulledAll,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	tracer := env.Tracer.Tracer(Service)
	opts := func(stage string, renew bus.Renewal) bus.Options {
		return bus.Options{Service: busService, Stage: stage, Log: env.Log, Tracer: tracer, Metrics: bm,
			DLQ: env.JS, Renew: renew, Health: env.Health}
	}
	env.Log.Info("controller started", "source", cfg.Source, "types", cfg.Types.all(), "resync", cfg.Resync)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return bus.Consume(ctx, changes, c.onChange, opts("changes", renewChanges)) })
	g.Go(func() error { return bus.Consume(ctx, pulled, c.onPulled, opts("pulled", renewPulled)) })
	g.Go(func() error { c.resyncLoop(ctx); return nil })
	g.Go(func() error { c.wake.run(ctx); return nil })
	g.Go(func() error { c.keepLoop(ctx); return nil })
	return g.Wait()
}

func newController(ctx context.Context, env svc.Env, cfg Config) (*controller, error) {
	c := &controller{env: env, cfg: cfg, held: map[string]heldJob{}}
	var resources, leases jetstream.KeyValue
	err := msg.Open(ctx, Service+": buckets", func(ctx context.Context) (err error) {
		if resources, err = env.JS.KeyValue(ctx, msg.BucketResources); err != nil {
			return err
		}
		if leases, err = env.JS.KeyValue(ctx, msg.BucketLeases); err != nil {
			return err
		}
		c.pulls, err = env.JS.KeyValue(ctx, msg.BucketPulls)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.objs = objects{kv: resources, source: cfg.Source}
	if c.metrics, err = newMetrics(env.Registry); err != nil {
		return nil, err
	}
	slotOpts := []slots.Option{slots.WithObserver(func(scope string, delta int) {
		c.metrics.slots.WithLabelValues(scope).Add(float64(delta))
	}), slots.WithLogger(env.Log)}
	ttl := slots.DefaultTTL
	if cfg.SlotTTL > 0 {
		ttl = cfg.SlotTTL
		slotOpts = append(slotOpts, slots.WithTTL(cfg.SlotTTL))
	}
	if c.slots, err = slots.New(leases, env.JS, slotOpts...); err != nil {
		return nil, err
	}
	c.builder = &job.Builder{HelperImage: cfg.HelperImage, HelperBinary: cfg.HelperBinary, ServiceAccounts: kubeServiceAccounts{cfg.Kube}}
	c.wake = newWakeups(c.onWake)
	c.keeper = newKeeper(ttl)
	c.slotWaits = newSlotWaits(c.slots, cfg.SlotPoll, func(namespace, name string) {
		c.wake.at(namespace, name, c.cfg.Now())
	})
	return c, nil
}

func (c *controller) changeSubjects() []string {
	var out []string
	for _, t := range c.cfg.Types.all() {
		out = append(out, msg.ChangeSubject(c.cfg.Source, t))
	}
	return out
}

// onChange dispatches one change by the type of the object it names.
func (c *controller) onChange(ctx context.Context, m jetstream.Msg) error {
	var ch msg.Change
	if err := msg.Decode(m.Data(), &ch); err != nil {
		return err
	}
	if ch.Source != c.cfg.Source {
		return msg.Permanent(fmt.Errorf("a change of source %q, not %q", ch.Source, c.cfg.Source))
	}
	t := c.cfg.Types
	var err error
	switch ch.Type {
	case t.Deployments, t.StatefulSets, t.DaemonSets:
		err = c.reconcileWorkload(ctx, ch.Type, ch.Namespace, ch.Name)
	case t.Images:
		err = c.reconcileImage(ctx, ch.Namespace, ch.Name)
	case t.Jobs:
		err = c.onJob(ctx, ch.Namespace, ch.Name)
	case t.Policies:
		err = c.reconcilePolicies(ctx)
	case t.Nodes, t.Namespaces:
		err = c.reconcileWorkloads(ctx)
	default:
		return msg.Permanent(fmt.Errorf("a change of type %q, which the puller does not read", ch.Type))
	}
	return retryable(err)
}

// onPulled looks again at the PrePullImage an agent's outcome is for.
func (c *controller) onPulled(ctx context.Context, m jetstream.Msg) error {
	var p msg.Pulled
	if err := msg.Decode(m.Data(), &p); err != nil {
		return err
	}
	return retryable(c.reconcileImage(ctx, p.Namespace, p.Name))
}

// retryable makes a failed step (a conflict, an API server or bucket that
// did not answer) a retry soon: the message is handled again and the
// state read again. A conflict is msg.ErrBusy (logged as no failure).
func retryable(err error) error {
	if err == nil || msg.IsPermanent(err) {
		return err
	}
	if apierrors.IsConflict(err) {
		// Another replica wrote first: no failure, the next look reads
		// what it wrote.
		err = fmt.Errorf("%w: %w", msg.ErrBusy, err)
	}
	return msg.Retry(err, 500*time.Millisecond)
}

// onWake is a timer's look at a PrePullImage.
func (c *controller) onWake(ctx context.Context, namespace, name string) {
	if err := c.reconcileImage(ctx, namespace, name); err != nil && ctx.Err() == nil {
		c.env.Log.WarnContext(ctx, "looking again at a PrePullImage failed; will retry", "prepullimage", namespace+"/"+name, "err", err)
		c.wake.at(namespace, name, c.cfg.Now().Add(time.Second))
	}
}

// resyncLoop looks at everything at start and every Resync.
func (c *controller) resyncLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Resync)
	defer t.Stop()
	for {
		if err := c.resync(ctx); err != nil && ctx.Err() == nil {
			c.env.Log.WarnContext(ctx, "resync failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *controller) resync(ctx context.Context) error {
	return errors.Join(c.reconcilePolicies(ctx), c.reconcileImages(ctx))
}

// releaseAll abandons the slots this replica holds: the Jobs go on, and
// another replica adopts their slots (or they expire after their TTL).
func (c *controller) releaseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, hj := range c.held {
		hj.h.Abandon()
		delete(c.held, name)
	}
}
