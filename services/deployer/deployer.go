// Package deployer delivers validated bundles to running programs.
//
// "deployer-orders", a durable consumer, reads verdicts: an accepted bundle
// becomes one deploy order per instance of its target
// (weft.deploy.<target>.<instance>, de-duplicated by target, instance and
// version); a refused one is logged and nothing is deployed, so the last
// good configuration keeps serving. Each instance has its own durable
// consumer of orders ("deployer-<target>-<instance>", one order in flight
// across all replicas), so instances deploy in parallel and each in order.
// Verdicts and orders are checked against the validation status: a verdict
// becomes orders only once the status records it, or a newer bundle (then
// that one is ordered), as the last accepted bundle, and an order is carried out only for the last accepted bundle or,
// re-applying (trigger, drift check), for the bundle the instance's status
// names; one superseded by a newer accepted bundle carries out that bundle
// instead while the instance is behind it and is skipped otherwise (so a
// stream of acceptances faster than deploys still deploys the newest), an
// accepted order for the bundle the instance has is skipped, and anything
// else is dead-lettered (msg.ErrUnconfirmed), so no message can make real
// versions look old.
// An order for an older version than the instance already has is skipped;
// otherwise the bundle is read from the object store (relocated to the
// instance's folder when that is not the target's base), applied with the
// target's driver, and the outcome recorded on
// weft.deployed.<target>.<instance> and in the status bucket. A driver
// refusal (check_cmd failed, reload failed) is an outcome, recorded and not
// retried. Any other failure (a folder that cannot be written, an
// unreachable program) is reported (an ERROR log and a failed outcome once
// per failure streak and every reminder interval; the instance's status and
// the failed-deploys metric on every attempt) and the order is tried again,
// after a delay that doubles up to a maximum, until it is carried out or a
// newer order for the instance supersedes it: no order is dropped. One
// replica at a time applies to an instance: it holds the instance's deploy
// lease (leases bucket, deploy.<target>.<instance>) while it carries out
// an order, so an order delivered again while its first handler still runs
// waits for it. An order whose deployer died is delivered again after 2 s
// and carried out by another replica once the dead one's lease is over
// (msg.DeployLeaseTTL).
//
// With deploy.pods, a target's instances are the ready Pods its label
// selector picks among those the watcher stores, each reached at
// <scheme>://<status.podIP>:<port> and named pod-<namespace>_<name>: a Pod
// that becomes ready is ordered the last accepted bundle at once; one that
// stops being ready, terminates or goes away is removed with its consumer
// and status; and once a starting deployer has read the Pods, it removes the
// consumers and statuses of the target's instances whose Pods are gone.
//
// At start, every instance is ordered the last accepted bundle, through the
// same apply path as any order: the drivers compare the instance with it,
// so one that is behind catches up and one changed while no deployer ran
// (its folder removed) is repaired. weft.trigger.deploy.<target>, and
// every deploy.drift_check, re-apply the last accepted bundle too, which
// repairs drift. Certificates and files holding a private key are
// delivered 0600, or with deploy.mode when it gives others nothing. The
// deployer also answers weft.api.status.
//
// It keeps each target's history (msg.BucketHistory: every verdict, and
// the instances that ran each bundle), pruned to the target's history
// keep and max_age except for bundles running, pinned or last accepted,
// and answers weft.api.history, .diff, .rollback and .unpin. A rollback
// pins the target (msg.PinKey): every deployer then delivers the pinned
// bundle in place of the last accepted one, until the pin is lifted.
//
// With deploy.canary, an accepted verdict orders nothing itself: one
// replica at a time (msg.CanaryLeaseKey) gives the bundle to the canary
// instances, watches them for the hold through HAProxy's "show stat"
// (servers UP before and DOWN after, the 5xx share during the hold against
// the one before), and then orders it to the rest, or rolls the canaries
// back to the previous bundle and records the bundle refused. The canary's
// state is msg.CanaryKey in the status bucket, so a restarted deployer
// resumes it, and every way of ordering a bundle gives each instance what
// the canary allows it (desiredFor); a pin overrides a canary.
//
// A deployer delivers only the targets of its site (svc.Env.Site; empty:
// the hub): verdicts on the targets of other sites are left to their
// deployers. A site's deployer runs on its leaf node's JetStream, which
// sources its targets' verdicts, validation statuses and the bundles from
// the hub (msg.AtSite); its statuses name the site. There, a change of a
// target's validation status orders its last accepted bundle too (the
// verdict may come before the status, or not at all), and a bundle not
// yet sourced is waited for.
package deployer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// Service is the name in metrics, logs and the DLQ subject.
const Service = "deployer"

// OrdersConsumer is the durable consumer of verdicts; each instance's
// orders have their own (InstanceConsumer).
const OrdersConsumer = "deployer-orders"

// metrics name a deploy instance deploy_instance: Prometheus keeps the
// label instance for the scraped process.
type metrics struct {
	runtimeOps *prometheus.CounterVec
	deploys    *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	dur        *prometheus.HistogramVec
	canaries   *prometheus.CounterVec
	prunes     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runtimeOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_deployer_runtime_ops_total", Help: "Changes applied through the Runtime API without a reload, by target and instance.",
		}, []string{"target", "deploy_instance"}),
		deploys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_deployer_deploys_total", Help: "Deploys by target, instance, driver and outcome (applied, unchanged, skipped, failed).",
		}, []string{"target", "deploy_instance", "driver", "outcome"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_deployer_reloads_total", Help: "Reloads by target, instance and reason.",
		}, []string{"target", "deploy_instance", "reason"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_deployer_deploy_duration_seconds", Help: "Time to deploy a bundle to one instance.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"target", "driver"}),
		canaries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_deployer_canary_total", Help: "Canary verdicts (deploy.canary) by target and result (passed, refused).",
		}, []string{"target", "result"}),
		prunes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_deployer_history_prunes_total", Help: "History prune passes this replica ran (holding the prune lease).",
		}),
	}
	return m, svc.Register(reg, Service, m.runtimeOps, m.deploys, m.reloads, m.dur, m.canaries, m.prunes)
}

type deployer struct {
	env       svc.Env
	cfg       *config.Config
	m         *metrics
	status    jetstream.KeyValue
	leases    jetstream.KeyValue // deploy leases: one replica applies to an instance at a time
	bundles   *msg.BundleStore
	history   jetstream.KeyValue // each target's bundles: verdicts, deploys
	instances instanceSet
	// elsewhere: the targets other sites' deployers deliver, by site
	// ("" is the hub).
	elsewhere map[string]string
	// pruneAsked asks the pruner for a prune (capacity 1: asks made while one
	// is pending or running make one more).
	pruneAsked chan struct{}
}

// Run delivers bundles until ctx is done.
func Run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	if err := env.Check(); err != nil {
		return err
	}
	env = env.For(Service)
	if err := cfg.CheckSite(env.Site); err != nil {
		return fmt.Errorf("deployer: %w", err)
	}
	d := &deployer{env: env, cfg: cfg, instances: instanceSet{by: map[string][]*instance{}}, elsewhere: map[string]string{}, pruneAsked: make(chan struct{}, 1)}
	var err error
	if d.m, err = newMetrics(env.Registry); err != nil {
		return err
	}
	if err := msg.Open(ctx, "deployer: buckets and store", func(ctx context.Context) (err error) {
		if d.status, err = env.JS.KeyValue(ctx, msg.BucketStatus); err != nil {
			return err
		}
		d.bundles = msg.NewBundleStore(env.JS)
		if err = d.bundles.Open(ctx); err != nil {
			return err
		}
		if d.history, err = env.JS.KeyValue(ctx, msg.BucketHistory); err != nil {
			return err
		}
		d.leases, err = env.JS.KeyValue(ctx, msg.BucketLeases)
		return err
	}); err != nil {
		return err
	}
	consumers := map[string]string{}
	for _, name := range cfg.TargetNames() {
		if site := cfg.Targets[name].Deploy.Site; site != env.Site {
			d.elsewhere[name] = site
			continue
		}
		ins, err := newInstances(name, cfg.Targets[name])
		if err != nil {
			return err
		}
		d.instances.set(name, ins)
		for _, in := range ins {
			c := InstanceConsumer(name, in.name)
			if other, ok := consumers[c]; ok {
				return fmt.Errorf("deployer: instances %s and %s/%s would share the consumer %s; rename one", other, name, in.name, c)
			}
			consumers[c] = name + "/" + in.name
		}
	}
	// The watches start before the catch-up reads the pins and statuses,
	// and that reads before any consumer of this replica starts
	// (catchUpOrders).
	ws, err := d.openWatches(ctx)
	if err != nil {
		return err
	}
	following := false // the watches are handed to their followers
	defer func() {
		if !following {
			ws.stop()
		}
	}()
	catchUp, err := d.catchUpOrders(ctx)
	if err != nil {
		return fmt.Errorf("deployer: catch-up: %w", err)
	}
	orders, renewOrders, err := bus.Durable(ctx, env.JS, msg.StreamValidated, jetstream.ConsumerConfig{
		Durable: OrdersConsumer, Description: "turns accepted verdicts into deploy orders",
		// No MaxDeliver: a verdict is retried until it is turned into orders.
		FilterSubject: msg.ValidatedAll, AckPolicy: jetstream.AckExplicitPolicy, AckWait: deployAckWait, MaxDeliver: -1,
	})
	if err != nil {
		return fmt.Errorf("deployer: %w", err)
	}
	d.dropLegacyConsumer(ctx)
	bm, err := bus.NewMetrics(Service, env.Registry)
	if err != nil {
		return err
	}
	opts := bus.Options{Service: Service, Log: env.Log, Tracer: env.Tracer.Tracer(Service), Metrics: bm, DLQ: env.JS, AckWait: deployAckWait, Health: env.Health}
	stage := func(s string) bus.Options { o := opts; o.Stage = s; return o }
	g, ctx := errgroup.WithContext(ctx)
	verdicts := stage("verdicts")
	verdicts.Renew = renewOrders
	g.Go(func() error { return bus.Consume(ctx, orders, d.onVerdict, verdicts) })
	for _, name := range cfg.SiteTargets(env.Site) {
		ins, _ := d.instances.of(name)
		for _, in := range ins {
			g.Go(func() error { return d.consume(ctx, in, stage("orders")) })
		}
		if p := cfg.Targets[name].Deploy.Pods; p != nil {
			pf, err := newPodFollower(d, name, cfg.Targets[name], stage("orders"))
			if err != nil {
				return err
			}
			g.Go(func() error { return pf.follow(ctx) })
		}
		if every := cfg.Targets[name].Deploy.DriftCheck.D(); every > 0 {
			g.Go(func() error { return d.checkDrift(ctx, name, every) })
		}
	}
	following = true
	for _, name := range cfg.SiteTargets(env.Site) {
		if c := cfg.Targets[name].Deploy.Canary; c != nil {
			g.Go(func() error { return d.judgeCanaries(ctx, name, c) })
		}
	}
	g.Go(func() error { return d.followPins(ctx, ws.pins) })
	if ws.deploys != nil {
		g.Go(func() error { return d.followSiteDeploys(ctx, ws.deploys) })
	}
	if ws.accepted != nil {
		g.Go(func() error { return d.followAccepted(ctx, ws.accepted) })
	}
	g.Go(func() error { return d.catchUp(ctx, catchUp) })
	g.Go(func() error {
		return bus.Serve(ctx, env.NC, msg.TriggerDeployAll, "weft-deployer", d.onTrigger, stage("trigger-deploy"))
	})
	g.Go(func() error {
		return bus.Serve(ctx, env.NC, msg.APIStatus, msg.APIQueue, d.onStatus, stage("api-status"))
	})
	for _, api := range d.historyAPI() {
		g.Go(func() error { return bus.Serve(ctx, env.NC, api.subject, msg.APIQueue, api.handler, stage(api.stage)) })
	}
	g.Go(func() error { return d.prunePeriodically(ctx) })
	return g.Wait()
}

// watches are the watches of the status bucket a deployer follows: pins;
// at the hub with sites, the sites' deploy statuses; at a site, the
// validation statuses.
type watches struct {
	pins, deploys, accepted jetstream.KeyWatcher
}

func (w watches) stop() {
	for _, kw := range []jetstream.KeyWatcher{w.pins, w.deploys, w.accepted} {
		if kw != nil {
			msg.StopWatch(kw)
		}
	}
}

func (d *deployer) openWatches(ctx context.Context) (watches, error) {
	var w watches
	var err error
	if w.pins, err = msg.Watch(ctx, d.status, []string{pinKeys}, jetstream.UpdatesOnly()); err != nil {
		return w, fmt.Errorf("deployer: watch the pins: %w", err)
	}
	if d.env.Site == "" && len(d.cfg.Sites) > 0 {
		// From the start: the deploys recorded while no hub deployer ran.
		if w.deploys, err = msg.Watch(ctx, d.status, []string{siteDeploys}); err != nil {
			w.stop()
			return w, fmt.Errorf("deployer: watch the sites' deploy statuses: %w", err)
		}
	}
	if d.env.Site != "" {
		if w.accepted, err = msg.Watch(ctx, d.status, []string{acceptedKeys}, jetstream.UpdatesOnly()); err != nil {
			w.stop()
			return w, fmt.Errorf("deployer: watch the validation statuses: %w", err)
		}
	}
	return w, nil
}

// onVerdict turns an accepted bundle into deploy orders.
func (d *deployer) onVerdict(ctx context.Context, m jetstream.Msg) error {
	var v msg.Validated
	if err := msg.Decode(m.Data(), &v); err != nil {
		return err
	}
	_, ok := d.instances.of(v.Target)
	_, there := d.elsewhere[v.Target]
	if !ok && !there {
		return msg.Permanent(fmt.Errorf("verdict for unknown target %q", v.Target))
	}
	if ok && !there && v.OK && !v.Refutes && v.BundleHash != "" {
		// Its orders load the bundle: it is loaded while they are
		// published, which those on this replica find done or joins.
		defer d.bundles.Prefetch(ctx, v.BundleHash)()
	}
	// Orders first: the history is bookkeeping, not on a deploy's path. A
	// record that fails has the verdict delivered again, whose orders are
	// then duplicates the stream drops.
	if err := d.route(ctx, m, v); err != nil {
		return err
	}
	if err := d.recordVerdict(ctx, v); err != nil {
		return err
	}
	d.askPrune()
	return nil
}

// route orders what a verdict calls for: nothing for a refusal or a target
// of another site, a rollback for a refutation, else the accepted bundle
// to every instance unless the target is pinned or its canary goes first.
func (d *deployer) route(ctx context.Context, m jetstream.Msg, v msg.Validated) error {
	if site, there := d.elsewhere[v.Target]; there {
		d.env.Log.DebugContext(ctx, "verdict on a target of another site; left to its deployer", "target", v.Target, "site", site)
		return nil
	}
	if v.Refutes {
		return d.onRefuted(ctx, m, v)
	}
	if !v.OK {
		d.env.Log.WarnContext(ctx, "bundle refused by validation; the deployed configuration stays", "target", v.Target, "version", v.Version, "reason", v.Reason)
		return nil
	}
	vs, err := d.validation(ctx, v.Target)
	if err != nil {
		return err
	}
	switch {
	case v.Version < vs.LastGoodVersion:
		// A newer bundle was accepted meanwhile: it is ordered now, under
		// the id its own verdict orders it with, so that under a steady
		// stream of acceptances (each verdict read after the next one's
		// status) the newest is deployed rather than none.
		d.env.Log.DebugContext(ctx, "accepted bundle superseded by a newer one; the newest accepted is ordered", "target", v.Target, "version", v.Version, "last_good", vs.LastGoodVersion)
	case v.Version > vs.LastGoodVersion:
		return msg.Unconfirmed(msg.AgeOf(m.Metadata()), "verdict %s v%d: the validation status last accepted v%d", v.Target, v.Version, vs.LastGoodVersion)
	case v.BundleHash != vs.LastGood:
		return msg.Permanent(fmt.Errorf("%w: verdict %s v%d names bundle %s, the validation status %s", msg.ErrUnconfirmed, v.Target, v.Version, v.BundleHash, vs.LastGood))
	}
	return d.orderLastAccepted(ctx, v.Target, vs)
}

// orderLastAccepted orders the last accepted bundle vs names to every
// instance of target, unless the target is pinned or its canary goes
// first (the canary judge starts it: canaryStep; a site's target has no
// canary). Both the verdict path and a site's status path order through
// it, under one id.
func (d *deployer) orderLastAccepted(ctx context.Context, target string, vs msg.ValidationStatus) error {
	pin, err := d.readPin(ctx, target)
	if err != nil {
		return err
	}
	if pin != nil {
		d.env.Log.InfoContext(ctx, "target pinned; the accepted bundle is kept in the history, not deployed", "target", target, "version", vs.LastGoodVersion, "pinned", pin.Version, "since", pin.Since, "by", pin.By)
		return nil
	}
	if d.canaryConf(target) != nil {
		d.env.Log.InfoContext(ctx, "accepted bundle goes to the canary instances first", "target", target, "version", vs.LastGoodVersion)
		return nil
	}
	// The instances are read after the validation status: a Pod instance
	// added after this read reads the status itself after it was added
	// (podFollower.add), so it gets this bundle one way or the other.
	ins, _ := d.instances.of(target)
	return d.order(ctx, ins, vs.LastGoodVersion, vs.LastGood, msg.OrderValidated, lastAcceptedID(vs))
}

// lastAcceptedID gives the message id of the order of the last accepted
// bundle vs names: acceptedID, the same on every path that orders it; a
// status moved back (a refutation: FullOnly, LastGood older than the
// version it names) orders a bundle ordered before, likely within the
// stream's duplicate window, so its order has an id of its own.
func lastAcceptedID(vs msg.ValidationStatus) func(*instance) string {
	if vs.FullOnly && vs.Version != vs.LastGoodVersion {
		return func(in *instance) string {
			return fmt.Sprintf("%s.back-%d", acceptedID(in, vs.LastGoodVersion), vs.Version)
		}
	}
	return func(in *instance) string { return acceptedID(in, vs.LastGoodVersion) }
}

// validation reads the target's validation status, the record of what the
// validator accepted: the only thing that may order what is deployed.
func (d *deployer) validation(ctx context.Context, target string) (msg.ValidationStatus, error) {
	var vs msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, d.status, msg.ValidationStatusKey(target), &vs); err != nil {
		return vs, msg.Retry(err, time.Second)
	}
	return vs, nil
}

// confirmOrder checks an order against the validation status and the
// instance's deploy status st. It returns whether the order is carried
// out (false: superseded by a newer accepted bundle, skipped) or an error
// naming why the recorded state does not confirm it. An order is carried
// out when it names the last accepted bundle, or, re-applying (trigger,
// drift check), the bundle the instance has.
func confirmOrder(o msg.DeployOrder, vs msg.ValidationStatus, st msg.DeployStatus) (bool, error) {
	switch {
	case o.Version == vs.LastGoodVersion && o.BundleHash == vs.LastGood && vs.LastGood != "":
		return true, nil
	case o.Reapply() && o.Version == st.Version && o.BundleHash == st.BundleHash && st.BundleHash != "":
		return true, nil
	case o.Version < vs.LastGoodVersion:
		return false, nil
	}
	return false, msg.Permanent(fmt.Errorf("%w: order %s/%s v%d bundle %s: the validation status last accepted v%d (%s)",
		msg.ErrUnconfirmed, o.Target, o.Instance, o.Version, o.BundleHash, vs.LastGoodVersion, vs.LastGood))
}

// acceptedID is the message id of the order of an accepted version: the
// verdict path and a site's status path give it alike, so that a bundle
// ordered both ways is ordered once.
func acceptedID(in *instance, version uint64) string {
	return fmt.Sprintf("%s.%s@%d", in.target, in.name, version)
}

// order orders version to every instance of ins, with the message id
// id(instance) (no id, and so no deduplication, when id is nil).
func (d *deployer) order(ctx context.Context, ins []*instance, version uint64, hash, reason string, idOf func(*instance) string) error {
	for _, in := range ins {
		o := msg.DeployOrder{Target: in.target, Instance: in.name, Version: version, BundleHash: hash, Reason: reason}
		id := ""
		if idOf != nil {
			id = idOf(in)
		}
		if _, err := bus.Publish(ctx, d.env.JS, msg.DeploySubject(in.target, in.name), id, o); err != nil {
			return err
		}
	}
	return nil
}

// onTrigger re-deploys to every instance of a target the bundle it should
// have: the pinned one, or else the last one the validator accepted,
// whatever was deployed last.
// This repairs drift (someone changed the instance) and delivers a bundle
// an instance missed.
func (d *deployer) onTrigger(ctx context.Context, m *nats.Msg) (err error) {
	defer func() {
		if m.Reply == "" {
			return
		}
		if err != nil {
			_ = m.Respond([]byte("error: " + err.Error()))
			return
		}
		_ = m.Respond([]byte("queued"))
	}()
	name := msg.SubjectToken(m.Subject, 3)
	t, err := msg.DecodeTrigger(m.Data)
	if err != nil {
		return err
	}
	ins, ok := d.instances.of(name)
	if site, there := d.elsewhere[name]; !ok && there {
		return msg.Permanent(fmt.Errorf("target %q is delivered by the deployer of %s", name, siteName(site)))
	}
	if !ok {
		return msg.Permanent(fmt.Errorf("unknown target %q", name))
	}
	d.env.Log.InfoContext(ctx, "re-deploy requested", "target", name, "reason", t.Reason)
	for _, in := range ins {
		version, hash, _, err := d.desiredFor(ctx, name, in.name)
		if err != nil {
			return err
		}
		if err := d.order(ctx, []*instance{in}, version, hash, msg.OrderTrigger, nil); err != nil {
			return err
		}
	}
	return nil
}

// lastAccepted is the bundle every instance of target should hold unless
// the target is pinned (desired): the last one the validator stored as
// accepted. Only the status counts, never a verdict read from the stream,
// which anyone able to publish could have forged; a verdict is turned into
// orders only once the status confirms it. A target with nothing accepted
// yet is a permanent error.
func (d *deployer) lastAccepted(ctx context.Context, target string) (uint64, string, error) {
	var vs msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, d.status, msg.ValidationStatusKey(target), &vs); err != nil {
		return 0, "", err
	}
	if vs.LastGood == "" {
		return 0, "", msg.Permanent(fmt.Errorf("no accepted bundle for %s yet", target))
	}
	return vs.LastGoodVersion, vs.LastGood, nil
}

// onOrder carries out one deploy order. An order that cannot be carried
// out (anything but a driver's refusal: a folder that cannot be written, an
// unreachable program, a missing bundle) is reported (failing) and tried
// again in place, after a delay that grows up to a maximum, until it is
// carried out or a newer order for the instance supersedes it. The order
// stays in flight meanwhile (MaxAckPending 1), so the instance's orders
// keep their order and none is dropped.
func (d *deployer) onOrder(ctx context.Context, m jetstream.Msg) error {
	var o msg.DeployOrder
	if err := msg.Decode(m.Data(), &o); err != nil {
		return err
	}
	in := d.instance(o.Target, o.Instance)
	if in == nil {
		return msg.Permanent(fmt.Errorf("order for unknown instance %s/%s", o.Target, o.Instance))
	}
	log := d.env.Log.With("target", o.Target, "instance", o.Instance, "version", o.Version)
	var seq uint64
	if meta, err := m.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	return d.fenced(ctx, in, func(ctx context.Context) error { return d.attempt(ctx, log, in, o, seq) })
}

// attempt carries out an order, trying again in place until it is carried
// out, superseded, or found permanent.
func (d *deployer) attempt(ctx context.Context, log *slog.Logger, in *instance, o msg.DeployOrder, seq uint64) error {
	for attempt := uint64(1); ; attempt++ {
		err := d.carryOut(ctx, log, in, o, seq)
		if err == nil {
			d.recovered(ctx, log, in)
			return nil
		}
		if ctx.Err() != nil {
			return err // stopping, or the lease lost: the order is delivered again
		}
		if msg.IsPermanent(err) {
			return err // no attempt can carry it out (an unconfirmed order): dead-lettered
		}
		d.failed(ctx, log, in, o, attempt, err)
		superseded, werr := d.waitRetry(ctx, in, seq, retryDelay(attempt))
		if werr != nil {
			return err
		}
		if superseded {
			log.InfoContext(ctx, "failing order superseded by a newer one", "order", seq, "attempts", attempt)
			return nil
		}
	}
}

// carryOut brings the instance to the order's bundle and records the
// outcome; an error means the order was not carried out.
func (d *deployer) carryOut(ctx context.Context, log *slog.Logger, in *instance, o msg.DeployOrder, seq uint64) error {
	sctx, span := telemetry.Step(ctx, "deployer read state")
	st, rev, vs, pin, err := d.readState(sctx, in, o.Target)
	span.End()
	if err != nil {
		return err
	}
	if seq != 0 && st.Order == seq {
		log.InfoContext(ctx, "order delivered again after it was carried out; acknowledged", "order", seq)
		return nil
	}
	if st.Version > vs.LastGoodVersion {
		// Written from an order nothing confirmed: it orders nothing.
		log.WarnContext(ctx, "deploy status names a version never accepted; not trusted", "deployed_version", st.Version, "last_good", vs.LastGoodVersion)
		st.Version = 0
	}
	held, err := d.held(ctx, o, vs, pin)
	if err != nil {
		return err
	}
	current, err := confirmHeld(o, vs, st, held)
	if err != nil {
		return err
	}
	if !current && held == nil && d.canaryConf(o.Target) == nil && st.Version < vs.LastGoodVersion {
		// Superseded while the instance is still behind: the newest
		// accepted bundle is carried out in its place, so a stream of
		// acceptances faster than deploys does not starve the instance
		// (its own order then finds it done). Not under a canary, whose
		// record says what each instance gets.
		log.DebugContext(ctx, "order superseded; the newest accepted bundle is carried out in its place", "last_good", vs.LastGoodVersion)
		o.Version, o.BundleHash, current = vs.LastGoodVersion, vs.LastGood, true
		log = log.With("carries_out", o.Version) // the lines below are of that bundle
	}
	if current && o.Reason == msg.OrderValidated && o.Version == st.Version && o.BundleHash == st.BundleHash && st.LastError == "" {
		log.DebugContext(ctx, "order for the bundle the instance already has; skipped")
		return d.finish(ctx, msg.Deployed{Target: o.Target, Instance: o.Instance, Version: o.Version, BundleHash: o.BundleHash, Driver: in.driver, Outcome: msg.OutcomeSkipped}, seq, time.Now(), nil, 0)
	}
	start := time.Now()
	out := msg.Deployed{Target: o.Target, Instance: o.Instance, Version: o.Version, BundleHash: o.BundleHash, Driver: in.driver}
	if !current || o.Version < st.Version && !o.Reapply() && !held.names(o) {
		out.Outcome = msg.OutcomeSkipped
		if held != nil && !held.names(o) {
			log.InfoContext(ctx, "order skipped: the instance is held on another bundle", "held", held.why, "held_version", held.version, "held_bundle", held.hash)
		} else {
			log.InfoContext(ctx, "order for an older bundle skipped", "deployed_version", st.Version, "last_good", vs.LastGoodVersion)
		}
		return d.finish(ctx, out, seq, start, nil, 0)
	}
	sctx, span = telemetry.Step(ctx, "deployer load bundle")
	b, err := d.bundle(sctx, in, o.BundleHash)
	span.End()
	if err != nil {
		return err
	}
	sctx, span = telemetry.Step(ctx, "deployer apply "+in.driver)
	res, aerr := in.apply.Apply(sctx, b)
	span.End()
	out.Written, out.Removed, out.Reloaded, out.ReloadReason, out.RuntimeOps = res.Written, res.Removed, res.Reloaded, res.ReloadReason, res.RuntimeOps
	switch {
	case aerr == nil && len(res.Written)+len(res.Removed)+len(res.RuntimeOps) == 0 && !res.Reloaded:
		out.Outcome = msg.OutcomeUnchanged
	case aerr == nil:
		out.Outcome = msg.OutcomeApplied
	case ctx.Err() != nil:
		// Interrupted (the process is stopping): no verdict on the bundle.
		return fmt.Errorf("deploy %s/%s interrupted: %w", o.Target, o.Instance, aerr)
	case in.apply.Refused(aerr):
		out.Outcome, out.Error = msg.OutcomeFailed, aerr.Error()
		log.ErrorContext(ctx, "deploy refused by the driver", "err", aerr, "detail", res.Detail)
	default:
		return fmt.Errorf("deploy %s/%s: %w", o.Target, o.Instance, aerr)
	}
	if out.Outcome != msg.OutcomeFailed {
		log.InfoContext(ctx, "deployed", "outcome", out.Outcome, "written", res.Written, "removed", res.Removed,
			"runtime_ops", res.RuntimeOps, "reloaded", res.Reloaded, "reload_reason", res.ReloadReason)
	}
	return d.finish(ctx, out, seq, start, &st, rev)
}

// readState reads what an order is checked against, the three at once:
// the instance's deploy status (with its revision), the target's
// validation status and its pin. The deploy status changes only under the
// instance's lease, which the caller holds; the others may change at any
// time, so no order among the reads matters.
func (d *deployer) readState(ctx context.Context, in *instance, target string) (st msg.DeployStatus, rev uint64, vs msg.ValidationStatus, pin *msg.Pin, err error) {
	var g errgroup.Group
	g.Go(func() (err error) { st, rev, err = d.readStatus(ctx, in); return err })
	g.Go(func() (err error) { vs, err = d.validation(ctx, target); return err })
	g.Go(func() (err error) { pin, err = d.readPin(ctx, target); return err })
	err = g.Wait()
	return
}

// bundle reads a bundle from the object store, relocated for in. At a
// site the bundle comes by a source of its own, which may deliver it
// after the verdict and validation status that name it: a missing bundle
// is waited for up to msg.ConfirmWait before it is a failure.
func (d *deployer) bundle(ctx context.Context, in *instance, hash string) (msg.Bundle, error) {
	b, err := d.bundles.LoadBundle(ctx, hash)
	deadline := time.Now().Add(msg.ConfirmWait)
	for wait := 50 * time.Millisecond; (errors.Is(err, msg.ErrNotStored) || errors.Is(err, msg.ErrChunkMissing)) && d.env.Site != "" && time.Now().Before(deadline); wait = min(2*wait, time.Second) {
		if err := pause.For(ctx, wait); err != nil {
			return msg.Bundle{}, err
		}
		b, err = d.bundles.LoadBundle(ctx, hash)
	}
	if err != nil {
		return msg.Bundle{}, fmt.Errorf("read bundle: %w", err)
	}
	if in.relocate != "" {
		b, err = b.Relocate(in.relocate)
	}
	if err != nil {
		return msg.Bundle{}, fmt.Errorf("bundle %s: %w", hash, err)
	}
	return b, nil
}

// finish publishes the outcome of the order with stream sequence seq and
// then, when st is given, records in the status that the order was carried
// out. In that order, a deployer that dies between the two carries the
// order out again (the drivers are idempotent) and its outcome is dropped
// as a duplicate; one that dies after both finds the order in the status.
func (d *deployer) finish(ctx context.Context, out msg.Deployed, seq uint64, start time.Time, st *msg.DeployStatus, rev uint64) error {
	out.Duration, out.At = time.Since(start), time.Now().UTC()
	id := ""
	if seq != 0 {
		id = msg.DeployedID(out.Target, out.Instance, seq)
	}
	if _, err := bus.Publish(ctx, d.env.JS, msg.DeployedSubject(out.Target, out.Instance), id, out); err != nil {
		return err
	}
	d.m.deploys.WithLabelValues(out.Target, out.Instance, out.Driver, out.Outcome).Inc()
	d.m.dur.WithLabelValues(out.Target, out.Driver).Observe(out.Duration.Seconds())
	if st != nil {
		st.Driver, st.At, st.Order = out.Driver, out.At, seq
		st.Deploys++
		st.Failures = 0 // carried out: a failure streak ends
		if out.Outcome == msg.OutcomeFailed {
			st.LastError, st.LastErrorAt = out.Error, out.At
		} else {
			st.Version, st.BundleHash, st.LastError, st.LastErrorAt = out.Version, out.BundleHash, "", time.Time{}
		}
		st.RuntimeOps += uint64(len(out.RuntimeOps))
		d.m.runtimeOps.WithLabelValues(out.Target, out.Instance).Add(float64(len(out.RuntimeOps)))
		if out.Reloaded {
			if st.Reloads == nil {
				st.Reloads = map[string]int64{}
			}
			st.Reloads[out.ReloadReason]++
			d.m.reloads.WithLabelValues(out.Target, out.Instance, out.ReloadReason).Inc()
		}
		if err := d.writeStatus(ctx, *st, rev); err != nil {
			return err
		}
		if out.Outcome != msg.OutcomeFailed {
			d.recordDone(ctx, out)
		}
	}
	return nil
}

// recordDone records a deploy carried out and announced in the history.
// The record finishes it even when the process is stopping (ctx
// cancelled), within historyRecordTimeout, since no redelivery would
// record it again; a record that fails is logged.
func (d *deployer) recordDone(ctx context.Context, out msg.Deployed) {
	ran := msg.HistoryDeploy{Instance: out.Instance, Site: d.env.Site, At: out.At}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyRecordTimeout)
	defer cancel()
	if err := d.recordDeploy(hctx, out.Target, out.Version, out.BundleHash, ran); err != nil {
		d.env.Log.ErrorContext(ctx, "deployed, but not recorded in the history", "target", out.Target, "instance", out.Instance, "version", out.Version, "err", err)
	}
}

// historyRecordTimeout bounds recording a done deploy in the history.
const historyRecordTimeout = 5 * time.Second

func (d *deployer) instance(target, name string) *instance { return d.instances.get(target, name) }

func (d *deployer) readStatus(ctx context.Context, in *instance) (msg.DeployStatus, uint64, error) {
	st := msg.DeployStatus{Target: in.target, Instance: in.name, Driver: in.driver}
	rev, err := msg.LoadStatus(ctx, d.status, msg.DeployStatusKey(in.target, in.name), &st)
	if err != nil && rev > 0 {
		d.env.Log.Error("unreadable deploy status; starting over", "target", in.target, "instance", in.name, "err", err)
		return msg.DeployStatus{Target: in.target, Instance: in.name, Driver: in.driver}, rev, nil
	}
	return st, rev, err
}

func (d *deployer) writeStatus(ctx context.Context, st msg.DeployStatus, rev uint64) error {
	st.Site = d.env.Site
	if _, err := msg.StoreStatus(ctx, d.status, msg.DeployStatusKey(st.Target, st.Instance), st, rev); err != nil {
		return msg.Retry(err, 200*time.Millisecond)
	}
	return nil
}

// onStatus answers weft.api.status with every target's status and the
// links to the hub's sites.
func (d *deployer) onStatus(ctx context.Context, m *nats.Msg) error {
	if m.Reply == "" {
		return nil // nobody to answer
	}
	rep, err := msg.ReadStatus(ctx, d.status)
	if err != nil {
		return err
	}
	if rep.Sites, err = msg.ReadSites(ctx, d.env.JS, rep.At); err != nil {
		return err
	}
	out, err := msg.NewMsg(m.Reply, "", rep)
	if err != nil {
		return err
	}
	return m.RespondMsg(out)
}

// siteName names a site for people ("" is the hub).
func siteName(site string) string {
	if site == "" {
		return "the hub"
	}
	return "site " + site
}
