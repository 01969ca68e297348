// Package renderer turns the resources bucket into rendered bundles.
//
// On start it notes the end of WEFT_CHANGES, loads every object from the
// resources bucket into an in-memory index (one watch of the bucket,
// decoded on every CPU, put in the index in one write: load.go), and then
// follows change and
// sync messages from that point, so nothing between the load and the
// follow is missed; applying a change re-reads its key's last write from
// the bucket's stream (a put, or a delete or purge marker, at its own
// revision) and is ignored when the index already holds that revision
// (redelivery, duplicates and reordering change nothing). A change naming
// a revision the bucket does not hold is retried briefly, then
// dead-lettered. No target renders until every source has marked every
// watched type synced.
//
// A value change pokes only the targets that depend on the value: those
// whose last render read it (every target before its first render), and,
// for a target made from a confd resource, exactly the values its keys
// select. An object change pokes the targets whose Invalidate says it can
// alter their next render (something their last render read, a
// fragment's own type, or no render yet); an object written again with
// the same content is no change at all. A poke goes to the target's
// debouncer, or, with debounce 0, straight to the render loop. The
// service's single render loop keeps at most one pending render per
// target: whatever asks while a render runs is rendered once, next, after
// the change feed has caught up with what it delivered (catchup.go).
// Targets with fragments keep each
// fragment entry rendered from the last render: every change applied to the
// index (objects and values) is handed to each target's Invalidate from
// inside the index write, before any render can read the change, so a
// render re-renders only the entries the changes since the last render
// affect. Output whose bundle hash equals the last
// published one is dropped (unless forced by weft.trigger.render.<target>);
// otherwise the bundle is put in the object store under its hash and a
// render message with the next version is published, then the status. A
// template failure is published as a render message with a failure and
// kept in the status; the last good bundle stays where it is. A render's
// provenance names the objects changed since the target's previous render
// and the fields that differ, when this replica published that render.
//
// With Options.WebhookListen, the renderer also serves the validating
// admission webhook (webhook.go): a create or update of an object of a
// watched type with enable_validation_webhook is rendered in a dry run,
// every template target over a copy of the index with the object in place
// and a freshly compiled copy of the target, and each bundle is validated
// by the same scatter-gather as a real render, under a dry-run name in the
// object store (removed afterwards). The object is refused with the
// problems it causes: those the same target rendered without it does not
// have, a render failure, or an error the templates register against it.
// Nothing of a dry run is published, cached or deployed. What cannot be
// decided within validation_webhook.timeout (validators down, NATS down,
// the state not read yet) is answered by validation_webhook.failure_policy.
// Deletes are never refused.
package renderer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/lease"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/services/renderer/debounce"
)

// Service is the name in metrics, logs and the DLQ subject.
const Service = "renderer"

// testHookRender, when set (by tests, before the service starts), runs
// inside every render's read of the index, before the templates run.
var testHookRender func(target string)

// ErrUnknownTarget is a trigger for a target that is not configured.
var ErrUnknownTarget = errors.New("unknown target")

type metrics struct {
	leases    *prometheus.GaugeVec
	renders   *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	objects   *prometheus.GaugeVec
	fragments *prometheus.CounterVec
	outputs   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_renderer_lease_held", Help: "1 when this replica holds a target's render lease.",
		}, []string{"target"}),
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_renderer_renders_total", Help: "Renders by target and outcome (published, unchanged, failed).",
		}, []string{"target", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_renderer_render_duration_seconds", Help: "Time to render a target.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"target"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_renderer_index_objects", Help: "Objects in the render index by type.",
		}, []string{"type"}),
		fragments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_renderer_fragment_entries_total", Help: "Fragment entries per render by target and outcome (rendered, reused).",
		}, []string{"target", "outcome"}),
		outputs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_renderer_outputs_total", Help: "Outputs (config, maps, files, certificates) per render by target and outcome (rendered, reused).",
		}, []string{"target", "outcome"}),
	}
	return m, svc.Register(reg, Service, m.leases, m.renders, m.duration, m.objects, m.fragments, m.outputs)
}

type request struct {
	target  string
	force   bool
	cause   string
	trigger *msg.Trigger // the trigger that asked for it, if one did
	parent  trace.SpanContext
}

type targetState struct {
	name    string
	t       *target.Target
	compile error
	deb     *debounce.Debouncer // nil: debounce 0, every poke asks for a render
	lease   *lease.Lease
	// ask queues a render request of this target (renderer.enqueue).
	ask func(request)

	// selects, when set, is the target's dependence on values, known
	// before any render (a confd resource).
	selects func(name string) bool

	mu     sync.Mutex
	parent trace.SpanContext // the last change that poked this target
	cause  string
	// The values the last render read (all: it listed them); nil before
	// the first render, when any value matters.
	valuesRead map[string]bool
	allValues  bool

	// changes are the objects changed since the last render read the
	// index (Provenance.Changed).
	changes changeLog

	// affected is set when an index change can alter the target's next
	// render (Target.Invalidate said so, or the target cannot tell); the
	// change's handler pokes the target only then.
	affected atomic.Bool

	// pending is the render asked for and not started yet: at most one
	// per target, whatever the number of asks, so a render in flight
	// absorbs every change that arrives meanwhile into one next render.
	pending *request
	// leased follows the render lease as its gains and losses are
	// reported; a gain asks for a render under the same lock, so the
	// render that covers the gain is exactly one.
	leased bool
}

// leaseChanged records a gain or loss of the render lease; a gain asks for
// a render (merged with one already pending) and reports that it did.
func (ts *targetState) leaseChanged(held bool) bool {
	ts.mu.Lock()
	ts.leased = held
	ts.mu.Unlock()
	return held && ts.want(request{cause: "lease"})
}

// want merges req into the target's pending request and reports whether
// none was pending.
func (ts *targetState) want(req request) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	req.target = ts.name
	if ts.pending == nil {
		ts.pending = &req
		return true
	}
	p := ts.pending
	p.force = p.force || req.force
	if req.parent.IsValid() {
		p.parent = req.parent
	}
	if req.cause != "" && (req.trigger != nil || p.trigger == nil) {
		p.cause = req.cause // a trigger's cause stays what the render is for
	}
	if req.trigger != nil {
		p.trigger = req.trigger
	}
	return false
}

// next takes the pending request, if any, and reports whether to render
// it: not without the lease (another replica renders the target; a gain
// of the lease asks again).
func (ts *targetState) next() (request, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.pending == nil {
		return request{}, false
	}
	req := *ts.pending
	ts.pending = nil
	return req, ts.leased
}

// dependsOnValue reports whether a change of the named value can change
// the target's output.
func (ts *targetState) dependsOnValue(name string) bool {
	if ts.selects != nil {
		return ts.selects(name)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.valuesRead == nil || ts.allValues || ts.valuesRead[name]
}

func (ts *targetState) recordValues(read []string, all bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.valuesRead = make(map[string]bool, len(read))
	for _, n := range read {
		ts.valuesRead[n] = true
	}
	ts.allValues = all
}

// poke records the change that made the target dirty and pokes its
// debouncer; more says further changes are already queued. Without a
// debouncer (debounce 0) it asks for a render at once: the render loop
// starts it once the previous render is done and the change feed has
// caught up (renderer.catchUp), so a burst costs one render.
func (ts *targetState) poke(parent trace.SpanContext, cause string, more bool) {
	ts.mu.Lock()
	ts.parent, ts.cause = parent, cause
	ts.mu.Unlock()
	if ts.deb == nil {
		ts.ask(request{parent: parent, cause: cause})
		return
	}
	if more {
		ts.deb.PokeMore()
	} else {
		ts.deb.Poke()
	}
}

// request is the render a debouncer fire asks for.
func (ts *targetState) request(name string) request {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return request{target: name, parent: ts.parent, cause: ts.cause}
}

type renderer struct {
	env     svc.Env
	cfg     *config.Config
	m       *metrics
	tracer  trace.Tracer
	kv      jetstream.KeyValue
	status  jetstream.KeyValue
	bundles *msg.BundleStore
	renders jetstream.Stream
	ix      *index.Index
	specs   []index.Spec // of ix: dry runs copy it
	leases  jetstream.KeyValue
	follow  *follower
	webhook *webhook // nil: none
	targets map[string]*targetState
	// wake tells the render loop that a target has a pending request.
	wake   chan struct{}
	synced chan struct{}
	// Initial sync: every "<source>.<type>" needs its marker, and the bucket
	// must have been seen up to the marker's revision.
	expected map[string]bool
	markers  map[string]uint64
	seen     uint64 // bucket revision this renderer has caught up with
	// loaded is the bucket revision up to which the index holds every
	// key's last write from a read of the whole bucket (load, readWhole):
	// a change up to it is known.
	loaded uint64
	// skipped is the highest revision of a change left, before the
	// first sync, to the read of the whole bucket (syncWhole).
	skipped uint64
	// feedCheck names the readiness check of this replica's change feed.
	feedCheck string
	// feed is the name of the change feed's durable consumer ("" before
	// it exists), and handled the stream sequence of the last message it
	// delivered that has been handled: a render waits for the feed to
	// catch up before it reads the index.
	feed    string
	handled progress
}

// leaseTTLs is how render leases expire: by a TTL of their own
// (msg.RenderLeaseTTL) where the bucket allows it, else by the bucket's.
type leaseTTLs struct {
	ttl    time.Duration
	perKey bool
}

func renderLeaseTTL(ctx context.Context, leases jetstream.KeyValue) (leaseTTLs, error) {
	st, err := leases.Status(ctx)
	if err != nil {
		return leaseTTLs{}, err
	}
	if js, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo }); ok && js.StreamInfo().Config.AllowMsgTTL {
		ttl := msg.RenderLeaseTTL
		if st.TTL() > 0 {
			ttl = min(ttl, st.TTL())
		}
		return leaseTTLs{ttl: ttl, perKey: true}, nil
	}
	return leaseTTLs{ttl: st.TTL()}, nil
}

func (l leaseTTLs) opts(pub lease.Publisher, key string) []lease.Option {
	if !l.perKey {
		return nil
	}
	return []lease.Option{lease.WithKeyTTL(pub, msg.LeaseSubject(key))}
}

// changesAckWait bounds how long a change held by a renderer that died
// waits; a live handler keeps its change with InProgress.
const changesAckWait = 5 * time.Second

// ChangesConsumer is the durable consumer of a renderer replica's change
// feed (a consumer name holds no dots or wildcards).
func ChangesConsumer(replica string) string {
	return "renderer-" + strings.Map(func(c rune) rune {
		if c == '.' || c == '*' || c == '>' || c <= ' ' || c == '/' || c == '\\' {
			return '_'
		}
		return c
	}, replica)
}

// deaf reports that this replica's change feed is lost or silent: it
// cannot follow the state, so it gives up its render leases to a replica
// that can.
func (r *renderer) deaf() bool {
	_, failing := r.env.Health.Failing()[r.feedCheck]
	return failing
}

// Run renders every target of cfg until ctx is done.
func Run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	return (&Options{}).Run(ctx, env, cfg)
}

// Run renders every target of cfg until ctx is done, and serves the
// validating admission webhook when o says where. It reads o when called,
// so flags can fill o after o.Run was handed to a host.
func (o *Options) Run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	if err := env.Check(); err != nil {
		return err
	}
	env = env.For(Service)
	r, err := newRenderer(ctx, env, cfg)
	if err != nil {
		return err
	}
	if r.webhook, err = newWebhook(r, *o); err != nil {
		return err
	}
	return r.run(ctx)
}

func newRenderer(ctx context.Context, env svc.Env, cfg *config.Config) (*renderer, error) {
	m, err := newMetrics(env.Registry)
	if err != nil {
		return nil, err
	}
	r := &renderer{env: env, cfg: cfg, m: m, tracer: env.Tracer.Tracer(Service), targets: map[string]*targetState{},
		wake: make(chan struct{}, 1), synced: make(chan struct{}), expected: map[string]bool{}, markers: map[string]uint64{}}
	var leases jetstream.KeyValue
	var leaseTTL leaseTTLs
	if err := msg.Open(ctx, "renderer: buckets, stream and store", func(ctx context.Context) (err error) {
		if r.kv, err = env.JS.KeyValue(ctx, msg.BucketResources); err != nil {
			return err
		}
		if r.renders, err = env.JS.Stream(ctx, msg.StreamRenders); err != nil {
			return err
		}
		if r.status, err = env.JS.KeyValue(ctx, msg.BucketStatus); err != nil {
			return err
		}
		r.bundles = msg.NewBundleStore(env.JS)
		if err := r.bundles.Open(ctx); err != nil {
			return err
		}
		if leases, err = env.JS.KeyValue(ctx, msg.BucketLeases); err != nil {
			return err
		}
		leaseTTL, err = renderLeaseTTL(ctx, leases)
		return err
	}); err != nil {
		return nil, err
	}
	specs := []index.Spec{{Type: config.ValuesType}}
	for _, name := range cfg.ResourceTypes() {
		specs = append(specs, index.Spec{Type: name, IndexBy: cfg.WatchedResources[name].IndexBy})
	}
	r.specs, r.leases = specs, leases
	if r.ix, err = index.New(specs); err != nil {
		return nil, fmt.Errorf("renderer: %w", err)
	}
	resources, err := env.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		return nil, fmt.Errorf("renderer: %w", err)
	}
	r.follow = &follower{ix: r.ix, bucket: resources, log: env.Log}
	for _, name := range cfg.TargetNames() {
		tc := cfg.Targets[name]
		ts := &targetState{name: name}
		ts.ask = func(req request) { r.enqueue(ts, req) }
		ts.t, ts.compile = target.Compile(name, tc)
		if ts.t != nil {
			ts.selects = ts.t.Selects()
		}
		if wait := tc.Render.Wait(); wait > 0 {
			ts.deb, err = debounce.New(wait, tc.Render.LeadingEdge(), func() { ts.ask(ts.request(name)) },
				debounce.WithMaxWait(tc.Render.Bound()))
			if err != nil {
				return nil, err
			}
		}
		key := msg.RenderLeaseKey(name)
		if ts.lease, err = lease.New(leases, key, env.Replica, leaseTTL.ttl, leaseTTL.opts(env.JS, key)...); err != nil {
			return nil, err
		}
		r.targets[name] = ts
	}
	for _, s := range cfg.Sources {
		for _, typ := range cfg.SourceTypes(s) {
			r.expected[s.Name+"."+typ] = true
		}
	}
	r.ix.Observe(r.invalidate)
	return r, nil
}

// invalidate hands one index change to every target's fragment cache. It
// runs inside the index write (see index.Observe), so no render reads the
// change before the entries it affects are marked.
func (r *renderer) invalidate(c index.Change) {
	var changes []engine.Change
	if c.Type == config.ValuesType {
		for _, obj := range []*index.Object{c.Old, c.New} {
			if name := valueNameOf(obj); name != "" {
				changes = append(changes, engine.Change{Value: name})
			}
		}
	} else {
		changes = []engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}}
	}
	for _, ts := range r.targets {
		affected := true
		if ts.t != nil {
			affected = ts.t.Invalidate(changes)
		}
		if c.Type == config.ValuesType {
			// A confd target knows the values it depends on before it
			// renders; the others from their last render.
			if affected = ts.dependsOnValue(valueName(c)); !affected {
				continue // a value this target does not read
			}
		}
		ts.changes.note(c)
		if affected {
			ts.affected.Store(true)
		}
	}
}

// valueName is the name of the value an index change of ValuesType is of.
func valueName(c index.Change) string {
	for _, obj := range []*index.Object{c.New, c.Old} {
		if name := valueNameOf(obj); name != "" {
			return name
		}
	}
	return ""
}

// valueNameOf is the name a stored value (nil: none) is of.
func valueNameOf(obj *index.Object) string {
	if obj == nil {
		return ""
	}
	name, _ := obj.Map()["name"].(string)
	return name
}

func (r *renderer) run(ctx context.Context) error {
	r.env.Health.Pending("renderer")
	defer r.env.Health.Remove("renderer")
	var info *jetstream.StreamInfo
	if err := msg.Open(ctx, "renderer: the changes stream", func(ctx context.Context) error {
		stream, err := r.env.JS.Stream(ctx, msg.StreamChanges)
		if err != nil {
			return err
		}
		info, err = stream.Info(ctx)
		return err
	}); err != nil {
		return err
	}
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := r.load(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		// A NATS node went away during the read: read it all again.
		r.env.Log.WarnContext(ctx, "reading the resources bucket failed; reading it again", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	// The replica's own change feed: durable, so it has as many replicas
	// as the stream and outlives the NATS node leading it; renewed after
	// the last change handled if it is lost all the same; removed by the
	// server a minute after its replica is gone.
	feed := ChangesConsumer(r.env.Replica)
	r.feed = feed
	// A feed of this process's previous configuration starts elsewhere in
	// the stream; its start cannot be updated, so it goes.
	if err := r.env.JS.DeleteConsumer(ctx, msg.StreamChanges, feed); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("renderer: %w", err)
	}
	cons, renew, err := bus.Durable(ctx, r.env.JS, msg.StreamChanges, jetstream.ConsumerConfig{
		Durable:        feed,
		Description:    "renderer replica " + r.env.Replica,
		FilterSubjects: []string{msg.ChangeAll, msg.SyncAll},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        changesAckWait,
		// No MaxDeliver: a change is retried until the bucket shows it.
		MaxDeliver:        -1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("renderer: %w", err)
	}
	r.feedCheck = bus.ConsumerCheck(Service, feed)
	bm, err := bus.NewMetrics(Service, r.env.Registry)
	if err != nil {
		return err
	}
	opts := bus.Options{Service: Service, Log: r.env.Log, Tracer: r.tracer, Metrics: bm, DLQ: r.env.JS}
	g, ctx := errgroup.WithContext(ctx)
	changes, triggers := opts, opts
	changes.Stage, triggers.Stage = "changes", "trigger-render"
	changes.AckWait, changes.Renew, changes.Health = changesAckWait, renew, r.env.Health
	g.Go(func() error { return bus.Consume(ctx, cons, r.onMessage, changes) })
	g.Go(func() error {
		return bus.Serve(ctx, r.env.NC, msg.TriggerRenderAll, "", r.onTrigger, triggers) // every replica: the lease holder renders
	})
	g.Go(func() error { return r.loop(ctx) })
	if r.webhook != nil {
		g.Go(func() error { return r.webhook.run(ctx) })
	}
	for name, ts := range r.targets {
		g.Go(func() error {
			return ts.lease.Run(ctx, r.deaf, func(held bool) {
				r.env.Log.Info("render lease", "target", name, "held", held)
				r.m.leases.WithLabelValues(name).Set(map[bool]float64{true: 1, false: 0}[held])
				if ts.leaseChanged(held) {
					r.wakeLoop()
				}
			})
		})
		if d := r.cfg.Targets[name].Render.MaxIdle.D(); d > 0 {
			g.Go(func() error { return r.idle(ctx, name, ts, d) })
		}
	}
	err = g.Wait()
	for _, ts := range r.targets {
		if ts.deb != nil {
			ts.deb.Stop()
		}
	}
	return err
}

func (r *renderer) onMessage(ctx context.Context, m jetstream.Msg) error {
	if meta, err := m.Metadata(); err == nil {
		defer r.handled.advance(meta.Sequence.Stream)
	}
	switch msg.SubjectToken(m.Subject(), 1) {
	case "sync":
		var s msg.Sync
		if err := msg.Decode(m.Data(), &s); err != nil {
			return err
		}
		return r.onSync(ctx, s, msg.AgeOf(m.Metadata()))
	case "change":
		var c msg.Change
		if err := msg.Decode(m.Data(), &c); err != nil {
			return err
		}
		// With more changes already waiting, this one is part of a
		// burst: it must not take the leading edge.
		var pending uint64
		if meta, err := m.Metadata(); err == nil {
			pending = meta.NumPending
		}
		return r.onChange(ctx, c, msg.AgeOf(m.Metadata()), pending)
	}
	return msg.Permanent(fmt.Errorf("unexpected subject %s", m.Subject()))
}

// onSync takes a type's sync marker from the status bucket, where the
// watcher writes it before announcing it: the message only says that it
// is there, so a sync message the bucket does not confirm cannot hold
// rendering back or open it early. Unconfirmed, it is retried for
// msg.ConfirmWait, then dead-lettered.
func (r *renderer) onSync(ctx context.Context, s msg.Sync, age time.Duration) error {
	var st msg.SyncStatus
	rev, err := msg.LoadStatus(ctx, r.status, msg.SyncStatusKey(s.Source, s.Type), &st)
	if err != nil {
		return msg.Retry(err, time.Second)
	}
	if rev == 0 || !st.Synced {
		return msg.Unconfirmed(age, "sync of %s.%s is not in the status bucket", s.Source, s.Type)
	}
	r.markers[s.Source+"."+s.Type] = st.Revision
	return r.syncWhole(ctx)
}

func (r *renderer) onChange(ctx context.Context, c msg.Change, age time.Duration, pending uint64) error {
	if _, typ, _, _, err := msg.ParseResourceKey(c.Key); err != nil || typ != c.Type {
		return msg.Permanent(fmt.Errorf("change of type %q names key %q of another type", c.Type, c.Key))
	}
	select {
	case <-r.synced:
	default:
		// Before the first sync nothing renders: the changes are left
		// to one read of the whole bucket once every source has synced.
		r.skipped = max(r.skipped, c.Revision)
		return r.syncWhole(ctx)
	}
	if c.Revision <= r.loaded {
		// The index holds the key's last write up to a revision read
		// whole since: this change is in it.
		if c.Revision > r.seen {
			r.seen = c.Revision
			r.checkSynced()
		}
		return nil
	}
	// A type this renderer does not index changes nothing, but its
	// revision is checked against the bucket all the same before it
	// counts as seen.
	changed, err := r.follow.applyChange(ctx, c, age)
	if err != nil {
		return err
	}
	if c.Revision > r.seen {
		r.seen = c.Revision
		r.checkSynced()
	}
	if !changed {
		return nil
	}
	sc := trace.SpanContextFromContext(ctx)
	for _, ts := range r.targets {
		if !ts.affected.Swap(false) {
			continue // nothing the target's last render read changed
		}
		ts.poke(sc, msg.ChangeSubject(c.Source, c.Type), pending > 0)
	}
	return nil
}

// checkSynced opens rendering once every expected marker is in and the
// bucket has been seen up to each marker's revision.
func (r *renderer) checkSynced() {
	for k := range r.expected {
		rev, ok := r.markers[k]
		if !ok || rev > r.seen {
			return
		}
	}
	select {
	case <-r.synced:
	default:
		close(r.synced)
		r.env.Health.Set("renderer", nil)
		r.env.Log.Info("all sources synced; rendering", "counts", r.ix.Counts())
	}
}

func (r *renderer) onTrigger(ctx context.Context, m *nats.Msg) error {
	name := msg.SubjectToken(m.Subject, 3)
	t, err := msg.DecodeTrigger(m.Data)
	if err != nil {
		return err
	}
	if _, ok := r.targets[name]; !ok {
		return msg.Permanent(fmt.Errorf("%w %q", ErrUnknownTarget, name))
	}
	if !r.targets[name].lease.Held() {
		return nil // the replica holding the lease renders it
	}
	r.env.Log.InfoContext(ctx, "render requested", "target", name, "reason", t.Reason, "by", t.By)
	r.targets[name].ask(request{force: true, cause: "trigger", trigger: &t, parent: trace.SpanContextFromContext(ctx)})
	if m.Reply != "" {
		_ = m.Respond([]byte("queued"))
	}
	return nil
}

func (r *renderer) idle(ctx context.Context, name string, ts *targetState, d time.Duration) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			ts.ask(request{cause: "max-idle"})
		}
	}
}

// enqueue makes req ts's pending request (merged with one already
// pending) and wakes the render loop. It never blocks and never drops a
// request.
func (r *renderer) enqueue(ts *targetState, req request) {
	if ts.want(req) {
		r.wakeLoop()
	}
}

func (r *renderer) wakeLoop() {
	select {
	case r.wake <- struct{}{}:
	default: // the loop is already woken
	}
}

// loop renders requested targets one at a time, once every source synced.
// Each target has at most one pending request: what arrives while a
// render runs is rendered once, by the next render of the target.
func (r *renderer) loop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-r.synced:
	}
	names := r.cfg.TargetNames()
	for _, name := range names {
		// Rendered where the lease is held; merged with the render a gain
		// of the lease asked for.
		r.targets[name].ask(request{cause: "start"})
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		}
		r.catchUp(ctx)
		for _, name := range names {
			if req, ok := r.targets[name].next(); ok {
				r.render(ctx, req)
			}
		}
	}
}

func (r *renderer) render(ctx context.Context, req request) {
	ts := r.targets[req.target]
	if !ts.lease.Held() {
		return // another replica renders this target
	}
	pctx := ctx
	if req.parent.IsValid() {
		pctx = trace.ContextWithRemoteSpanContext(ctx, req.parent)
	}
	ctx, span := r.tracer.Start(pctx, "render "+req.target, trace.WithAttributes(attribute.String("weft.target", req.target), attribute.String("weft.cause", req.cause)))
	defer span.End()
	log := r.env.Log.With("target", req.target)
	var res target.Result
	prov := msg.Provenance{Cause: req.cause, Trigger: req.trigger}
	var changed map[string]*pendingChange
	published := false
	defer func() {
		if changed != nil && !published {
			ts.changes.giveBack(changed)
		}
	}()
	// What the render is published against is read while the templates
	// run: two round trips off the change's path.
	recorded := r.readRecorded(ctx, req.target)
	err := ts.compile
	if err == nil {
		r.ix.Read(func(rev uint64) {
			prov = msg.Provenance{StateRevision: rev, Counts: r.ix.Counts(), Cause: req.cause, Trigger: req.trigger}
			changed = ts.changes.take()
			ts.affected.Store(false) // this render reads every change so far
			if testHookRender != nil {
				testHookRender(req.target)
			}
			tctx, span := telemetry.Step(ctx, "render templates")
			res, err = ts.t.RenderFetching(tctx, r.resources(), r.values(), r.fetch)
			span.End()
		})
		if err == nil {
			ts.recordValues(res.ValuesRead, res.AllValues)
			r.m.fragments.WithLabelValues(req.target, "rendered").Add(float64(res.FragmentsRendered))
			r.m.fragments.WithLabelValues(req.target, "reused").Add(float64(res.FragmentsReused))
			r.m.outputs.WithLabelValues(req.target, "rendered").Add(float64(res.OutputsRendered))
			r.m.outputs.WithLabelValues(req.target, "reused").Add(float64(res.OutputsReused))
		}
	}
	for typ, n := range prov.Counts {
		r.m.objects.WithLabelValues(typ).Set(float64(n))
	}
	r.m.duration.WithLabelValues(req.target).Observe(res.Took.Seconds())
	rec := recorded()
	st, rev := rec.st, rec.rev
	if rec.stErr != nil {
		log.ErrorContext(ctx, "reading render status failed", "err", rec.stErr)
		return
	}
	if err == nil && res.Bundle.Hash == st.BundleHash && !req.force {
		r.m.renders.WithLabelValues(req.target, "unchanged").Inc()
		if st.LastError != "" { // fixed back to the last good output
			st.LastError, st.LastErrorAt = "", time.Time{}
			r.writeStatus(ctx, st, rev)
		}
		return
	}
	lastSeq := rec.lastSeq
	if rec.seqErr != nil {
		log.ErrorContext(ctx, "reading the last render failed; will retry", "err", rec.seqErr)
		r.retryLater(req)
		return
	}
	if ts.changes.follows(st.Version) {
		prov.Changed, prov.ChangedMore = objectChanges(changed)
	}
	st.Version++
	out := msg.Render{Target: req.target, Version: st.Version, Provenance: prov, RenderTime: res.Took, At: time.Now().UTC()}
	if err != nil {
		r.m.renders.WithLabelValues(req.target, "failed").Inc()
		log.ErrorContext(ctx, "render failed; the last good bundle stays", "err", err)
		out.Failure = target.Failure(err)
		st.LastError, st.LastErrorAt = err.Error(), out.At
	} else {
		sctx, span := telemetry.Step(ctx, "render store bundle")
		perr := r.putBundle(sctx, res.Bundle)
		span.End()
		if perr != nil {
			log.ErrorContext(ctx, "storing bundle failed; will retry", "err", perr)
			r.retryLater(req)
			return
		}
		r.m.renders.WithLabelValues(req.target, "published").Inc()
		out.BundleHash, out.Files, out.Errors = res.Bundle.Hash, res.Bundle.Refs(), res.Errors
		st.BundleHash, st.Provenance, st.Errors = res.Bundle.Hash, prov, res.Errors
		st.LastError, st.LastErrorAt = "", time.Time{}
		for _, e := range res.Errors {
			log.WarnContext(ctx, "template reported a resource error", "type", e.Type, "id", e.ID, "message", e.Message)
		}
		log.InfoContext(ctx, "rendered", "version", st.Version, "hash", res.Bundle.Hash[:12], "took", res.Took, "cause", req.cause,
			"fragments_rendered", res.FragmentsRendered, "fragments_reused", res.FragmentsReused,
			"outputs_rendered", res.OutputsRendered, "outputs_reused", res.OutputsReused)
	}
	st.At = out.At
	pctx, pspan := telemetry.Step(ctx, "render publish")
	defer pspan.End()
	if perr := r.publish(pctx, &st, &out, lastSeq); perr != nil {
		log.ErrorContext(ctx, "publishing render failed; will retry", "err", perr)
		r.retryLater(req)
		return
	}
	published = true
	ts.changes.published(st.Version)
	if !r.writeStatus(ctx, st, rev) {
		r.retryLater(req) // the validator waits for the status to confirm the render
	}
}

// fetch answers fetch(type, namespace, name) in templates: it asks the
// watcher of the source that holds the object (weft.api.fetch.<source>) for
// the body it keeps on demand.
func (r *renderer) fetch(ctx context.Context, typ, namespace, name string) (map[string]any, error) {
	st := r.ix.Store(typ)
	if st == nil {
		return nil, fmt.Errorf("%q is not a watched type", typ)
	}
	for _, src := range r.cfg.Sources {
		if src.Type != config.SourceKubernetes {
			continue
		}
		if _, ok := st.Get(msg.ResourceKey(src.Name, typ, namespace, name)); !ok {
			continue
		}
		req, err := msg.NewMsg(msg.FetchSubject(src.Name), "", msg.FetchRequest{Type: typ, Namespace: namespace, Name: name})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := r.env.NC.RequestMsgWithContext(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("ask source %s: %w", src.Name, err)
		}
		var rep msg.FetchReply
		if err := msg.Decode(resp.Data, &rep); err != nil {
			return nil, err
		}
		if rep.Error != "" {
			return nil, errors.New(rep.Error)
		}
		return rep.Object, nil
	}
	return nil, fmt.Errorf("no %s %s/%s in any kubernetes source", typ, namespace, name)
}

// resources are the watched types templates see (values are apart).
func (r *renderer) resources() map[string]any {
	out := r.ix.Stores()
	delete(out, config.ValuesType)
	return out
}

// values are the values of every value source by name.
func (r *renderer) values() map[string]any { return valuesOf(r.ix) }

func (r *renderer) retryLater(req request) {
	req.force = true
	ts := r.targets[req.target]
	time.AfterFunc(time.Second, func() { r.enqueue(ts, req) })
}

// putBundle stores b by content; storing a bundle stored before writes its
// description and the chunks the store could soon drop.
func (r *renderer) putBundle(ctx context.Context, b msg.Bundle) error {
	return r.bundles.PutBundle(ctx, "", b)
}

// recordedState is what a render of a target is published against: its
// render status (with the revision the status write expects) and the
// sequence of its last render message (which the publish expects).
type recordedState struct {
	st            msg.RenderStatus
	rev, lastSeq  uint64
	stErr, seqErr error
}

// readRecorded starts reading the recorded state of target, both reads at
// once, and returns the wait for them. The target's render lease makes
// this replica the only one to change either, so reading them before the
// render rather than after it changes nothing they guard.
func (r *renderer) readRecorded(ctx context.Context, target string) func() recordedState {
	done := make(chan recordedState, 1)
	go func() {
		var rec recordedState
		var wg sync.WaitGroup
		wg.Go(func() { rec.lastSeq, rec.seqErr = r.lastRender(ctx, target) })
		rec.st, rec.rev, rec.stErr = r.readStatus(ctx, target)
		wg.Wait()
		done <- rec
	}()
	return func() recordedState { return <-done }
}

// lastRender reads the stream sequence of a target's last render message
// (0: none) from the stream's leader. Only the sequence is used, never the
// version in it: anyone able to publish could have written that message.
func (r *renderer) lastRender(ctx context.Context, name string) (uint64, error) {
	m, err := r.renders.GetLastMsgForSubject(ctx, msg.RenderSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// publish publishes out at st.Version, only on the render message read
// before it (lastSeq): a replica that published meanwhile makes this a
// conflict, and the render is tried again on fresh state. A version the
// stream already holds (published by a render whose status write failed)
// is not dropped as a duplicate: out goes out at the next free version.
func (r *renderer) publish(ctx context.Context, st *msg.RenderStatus, out *msg.Render, lastSeq uint64) error {
	for range 10 {
		_, err := bus.PublishNew(ctx, r.env.JS, msg.RenderSubject(out.Target), msg.RenderID(out.Target, st.Version), *out,
			jetstream.WithExpectLastSequencePerSubject(lastSeq))
		if !errors.Is(err, bus.ErrDuplicate) {
			return err
		}
		r.env.Log.WarnContext(ctx, "render version published before without a status; taking the next", "target", out.Target, "version", st.Version)
		st.Version++
		out.Version = st.Version
	}
	return fmt.Errorf("render versions up to %d of %s were all published before", st.Version, out.Target)
}

func (r *renderer) readStatus(ctx context.Context, name string) (msg.RenderStatus, uint64, error) {
	st := msg.RenderStatus{Target: name}
	rev, err := msg.LoadStatus(ctx, r.status, msg.RenderStatusKey(name), &st)
	if err != nil && rev > 0 {
		r.env.Log.Error("unreadable render status; starting over", "target", name, "err", err)
		return msg.RenderStatus{Target: name}, rev, nil
	}
	return st, rev, err
}

// writeStatus writes the render status and reports whether it did.
func (r *renderer) writeStatus(ctx context.Context, st msg.RenderStatus, rev uint64) bool {
	if _, err := msg.StoreStatus(ctx, r.status, msg.RenderStatusKey(st.Target), st, rev); err != nil {
		r.env.Log.ErrorContext(ctx, "writing render status failed", "target", st.Target, "err", err)
		return false
	}
	return true
}
