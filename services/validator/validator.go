// Package validator decides whether a rendered bundle may be deployed.
//
// It runs two roles. Each validator kind (template, haproxy, syntax,
// policy; a replica serves those of Options.Kinds, or else every kind that
// can run on the machine) answers weft.validate.<target> requests in its
// own queue group, so any number of replicas answer once per kind, and
// keeps a heartbeat per kind in the leases bucket. The gatherer consumes
// render messages from the durable consumer "validator" (one replica
// handles each render), asks the kinds the target expects (configured, or
// every kind with a live heartbeat) and waits for all of them or the
// target's timeout, then publishes the verdict on weft.validated.<target>
// and keeps it in the status bucket. A bundle is accepted only when every
// kind that answered found no error and either all expected kinds answered
// or at least validate.min_kinds did; a kind that did not answer is named
// in the verdict. Complete verdicts are cached by bundle hash and kinds, so
// a bundle seen before is not validated again. A kind that cannot run on
// the machine (haproxy without its binary) makes Run fail at start when
// Options.Kinds names it or a target expects it.
// A render message orders the validation status only when the renderer's
// status confirms it (its version, and its bundle when it is the newest);
// one beyond that status is retried for msg.ConfirmWait and then
// dead-lettered, so a forged render cannot make real versions look old. A
// render whose bundle a newer published render replaced (the renderer's
// status names a newer version with another bundle) is not validated: that
// newer render is, so a validator behind the renderer catches up on the
// newest bundle (weft_validator_renders_superseded_total). A
// gather without a verdict (a kind that did not answer, or could not read
// the bundle) is asked again, never taken as a refusal. A dry run's request
// (msg.ValidateRequest.DryRunObject, from the renderer's admission webhook)
// is answered from the bundle under that name; its gather is the
// requester's, so nothing of it is cached, published or kept in a status.
// A bundle that differs from the target's last fully accepted one only in
// runtime values is accepted provisionally by the haproxy kind and checked
// whole after its verdict; a refusal then rolls the target back (fast.go).
package validator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/services/validator/haproxycheck"
	"github.com/weftio/weft/services/validator/kind"
)

// Service is the name in metrics, logs and the DLQ subject.
const Service = "validator"

// ConsumerName is the durable consumer of render messages.
const ConsumerName = "validator"

type metrics struct {
	verdicts   *prometheus.CounterVec
	superseded *prometheus.CounterVec
	checks     *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_validator_verdicts_total", Help: "Gathers by target and verdict (accepted, refused, cached-accepted, cached-refused, and undecided: asked again).",
		}, []string{"target", "verdict"}),
		superseded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_validator_renders_superseded_total", Help: "Renders not validated because a newer render of the target, with another bundle, was already published (that one is validated).",
		}, []string{"target"}),
		checks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_validator_check_duration_seconds", Help: "Time one kind took to check a bundle.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"kind"}),
	}
	return m, svc.Register(reg, Service, m.verdicts, m.superseded, m.checks)
}

// Checkers returns the checkers of kinds (names of config.Kinds) for cfg,
// the policy kind holding each target's rules. A kind that cannot run here
// (haproxy without its binary) is an error saying why and how to fix it,
// wrapping ErrKindUnavailable and the cause (haproxycheck.ErrNoBinary).
func Checkers(cfg *config.Config, kinds []string) ([]kind.Checker, error) {
	out := make([]kind.Checker, 0, len(kinds))
	for _, k := range kinds {
		c, err := newChecker(cfg, k)
		if err != nil {
			return nil, kindError(k, err, nil)
		}
		out = append(out, c)
	}
	return out, nil
}

// ErrKindUnavailable: a validator kind cannot run on this machine.
var ErrKindUnavailable = errors.New("cannot run here")

func newChecker(cfg *config.Config, k string) (kind.Checker, error) {
	switch k {
	case config.KindTemplate:
		return kind.NewTemplateChecker(cfg), nil
	case config.KindHAProxy:
		hc, err := haproxycheck.New()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKindUnavailable, err)
		}
		return kind.HAProxyChecker{C: hc}, nil
	case config.KindSyntax:
		return kind.SyntaxChecker{}, nil
	case config.KindPolicy:
		policies := kind.TargetPolicies{}
		for name, t := range cfg.Targets {
			policies[name] = t.Validate.Policy
		}
		return policies, nil
	}
	return nil, fmt.Errorf("is unknown (known: %s)", strings.Join(config.Kinds, ", "))
}

// kindError says that kind k, which targets expect, cannot be checked.
func kindError(k string, err error, targets []string) error {
	if len(targets) > 0 {
		return fmt.Errorf("kind %s, which targets %s expect (validate.kinds), %w", k, strings.Join(targets, ", "), err)
	}
	return fmt.Errorf("kind %s %w", k, err)
}

// serving returns the checkers of the kinds this replica serves. Every kind
// named with --kinds (explicit) must run here. Of every kind (no --kinds),
// one that cannot run here is left out, and said so in the log, unless a
// target expects it: then the configuration cannot be validated as it says,
// which is an error at start rather than verdicts that wait for a kind
// nobody serves.
func serving(cfg *config.Config, kinds []string, explicit bool, log *slog.Logger) ([]kind.Checker, error) {
	var out []kind.Checker
	for _, k := range kinds {
		c, err := newChecker(cfg, k)
		targets := expecting(cfg, k)
		switch {
		case err == nil:
			out = append(out, c)
			continue
		case explicit || len(targets) > 0 || !errors.Is(err, ErrKindUnavailable):
			return nil, kindError(k, err, targets)
		}
		log.Info("validator kind not served: it cannot run here and no target expects it", "kind", k, "err", err.Error())
	}
	return out, nil
}

// expecting lists the targets whose validate.kinds name k.
func expecting(cfg *config.Config, k string) []string {
	var out []string
	for _, name := range cfg.TargetNames() {
		if slices.Contains(cfg.Targets[name].Validate.Kinds, k) {
			out = append(out, name)
		}
	}
	return out
}

type validator struct {
	env      svc.Env
	cfg      *config.Config
	m        *metrics
	reg      *registry
	bundles  *msg.BundleStore
	status   jetstream.KeyValue
	verdicts jetstream.KeyValue
	fast     *fastMetrics
	cache    bundleCache
	confirms *confirmer
	// pendingSweep: see runConfirmer.
	pendingSweep time.Duration
	// checksBundles: this replica serves a kind, which loads the bundles
	// it is asked to check.
	checksBundles bool
}

// Run answers validation requests for every kind and gathers verdicts until
// ctx is done.
func Run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	return (&Options{}).Run(ctx, env, cfg)
}

// Run answers validation requests for the kinds of o and gathers verdicts
// until ctx is done. It reads o when called, so flags can fill o after
// o.Run was handed to a host.
func (o *Options) Run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	if err := env.Check(); err != nil {
		return err
	}
	own, err := o.check()
	if err != nil {
		return err
	}
	env = env.For(Service)
	checkers, err := serving(cfg, own.Kinds, len(o.Kinds) > 0, env.Log)
	if err != nil {
		return err
	}
	served := make([]string, len(checkers))
	for i, c := range checkers {
		served[i] = c.Name()
	}
	if o.wrapChecker != nil {
		for i, c := range checkers {
			checkers[i] = o.wrapChecker(c)
		}
	}
	v := &validator{env: env, cfg: cfg, reg: newRegistry(own.HeartbeatTTL), confirms: newConfirmer(), pendingSweep: own.pendingSweep, checksBundles: len(checkers) > 0}
	if v.m, err = newMetrics(env.Registry); err != nil {
		return err
	}
	if v.fast, err = newFastMetrics(env.Registry); err != nil {
		return err
	}
	for _, name := range cfg.TargetNames() {
		v.fast.refuted.WithLabelValues(name) // exported at 0, so that its increase is seen
	}
	var leases jetstream.KeyValue
	if err := msg.Open(ctx, "validator: buckets and store", func(ctx context.Context) (err error) {
		if leases, err = env.JS.KeyValue(ctx, msg.BucketLeases); err != nil {
			return err
		}
		v.bundles = msg.NewBundleStore(env.JS)
		if err := v.bundles.Open(ctx); err != nil {
			return err
		}
		if v.status, err = env.JS.KeyValue(ctx, msg.BucketStatus); err != nil {
			return err
		}
		v.verdicts, err = env.JS.KeyValue(ctx, msg.BucketVerdicts)
		return err
	}); err != nil {
		return err
	}
	cons, renew, err := bus.Durable(ctx, env.JS, msg.StreamRenders, jetstream.ConsumerConfig{
		Durable: ConsumerName, Description: "gathers a verdict for every render",
		FilterSubject: msg.RenderAll, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: rendersAckWait, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	bm, err := bus.NewMetrics(Service, env.Registry)
	if err != nil {
		return err
	}
	opts := bus.Options{Service: Service, Log: env.Log, Tracer: env.Tracer.Tracer(Service), Metrics: bm, DLQ: env.JS, AckWait: time.Minute}
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range checkers {
		o := opts
		// Several at once: a fast-path answer must not wait for a whole
		// check (the background confirmation of the previous bundle).
		o.Stage, o.Workers = "validate-"+c.Name(), kindWorkers
		g.Go(func() error {
			return bus.Serve(ctx, env.NC, msg.ValidateAll, "weft-validator-"+c.Name(), v.answer(c), o)
		})
	}
	g.Go(func() error { return beat(ctx, leases, env.Replica, served, own.HeartbeatTTL, env.Log) })
	g.Go(func() error { return v.reg.follow(ctx, leases, env.Log) })
	renders := opts
	renders.Stage, renders.AckWait, renders.Renew, renders.Health = "renders", rendersAckWait, renew, env.Health
	g.Go(func() error { return bus.Consume(ctx, cons, v.onRender, renders) })
	g.Go(func() error { return v.runConfirmer(ctx) })
	return g.Wait()
}

// kindWorkers is how many requests each kind answers at once.
const kindWorkers = 4

// rendersAckWait bounds how long a render held by a validator that died
// waits for another; a live gather keeps its render with InProgress.
const rendersAckWait = 10 * time.Second

// answer handles one validation request for kind c.
func (v *validator) answer(c kind.Checker) bus.CoreHandler {
	return func(ctx context.Context, m *nats.Msg) error {
		start := time.Now()
		reply := msg.ValidateReply{Kind: c.Name(), Replica: v.env.Replica}
		var req msg.ValidateRequest
		err := msg.Decode(m.Data, &req)
		if err == nil && !req.Wants(c.Name()) {
			return nil // the requester does not wait for this kind
		}
		switch {
		case err != nil:
		case req.ConfigHash != "":
			cc, ok := c.(kind.ConfigChecker)
			if !ok {
				return nil // configurations are not this kind's business; the requester does not expect it
			}
			var cfg msg.Config
			if cfg, err = v.config(ctx, req.ConfigHash); err == nil {
				reply.Problems, err = cc.CheckConfig(ctx, cfg)
			}
		default:
			reply.Problems, reply.Provisional, err = v.checkBundle(ctx, c, req)
		}
		reply.Duration = time.Since(start)
		if err != nil && ctx.Err() != nil {
			// Stopping: a check cut short is no answer. The requester,
			// hearing nothing, asks again and another replica (or this
			// process's successor) answers.
			return err
		}
		v.m.checks.WithLabelValues(c.Name()).Observe(reply.Duration.Seconds())
		if err != nil {
			reply.Error, reply.Provisional = err.Error(), false
		} else {
			reply.OK = !kind.Failed(reply.Problems)
			reply.Provisional = reply.Provisional && reply.OK
		}
		if m.Reply != "" {
			if out, eerr := msg.NewMsg(m.Reply, "", reply); eerr == nil {
				_ = m.RespondMsg(out)
			}
		}
		return err
	}
}

// bundle reads a bundle (or a dry run's, by its object name). Not finding it is not final: the render naming it
// was published after the bundle was stored, so a store that does not have
// it yet (a node catching up) or lost it (expired), or a chunk of it missing or
// corrupted, makes the kind undecided,
// and the gatherer asks again.
func (v *validator) bundle(ctx context.Context, hash string) (msg.Bundle, error) {
	return v.bundles.LoadBundle(ctx, hash)
}

func (v *validator) config(ctx context.Context, hash string) (msg.Config, error) {
	return v.bundles.LoadConfig(ctx, hash)
}

// onRender gathers the verdict on one render message.
func (v *validator) onRender(ctx context.Context, m jetstream.Msg) error {
	var r msg.Render
	if err := msg.Decode(m.Data(), &r); err != nil {
		return err
	}
	if r.Failure != nil {
		return nil // nothing rendered, nothing to validate; the status says why
	}
	tc, ok := v.cfg.Targets[r.Target]
	if !ok {
		return msg.Permanent(fmt.Errorf("render for unknown target %q", r.Target))
	}
	if v.checksBundles && r.BundleHash != "" {
		// This replica's kinds are likely to be asked: the bundle is
		// loaded while the render is confirmed.
		defer v.bundles.Prefetch(ctx, r.BundleHash)()
	}
	kinds, err := v.reg.expected(ctx, tc.Validate)
	if err != nil {
		return err
	}
	cacheKey := msg.VerdictKey(r.BundleHash, kinds)
	// The validation status and the verdict cache are read while the
	// render is confirmed: three round trips at once.
	cctx, span := telemetry.Step(ctx, "validator confirm")
	prior := v.readPrior(cctx, r.Target, cacheKey)
	rs, err := v.confirm(cctx, r, msg.AgeOf(m.Metadata()))
	span.End()
	if err != nil {
		_ = prior() // no read outlives the handling
		return err
	}
	rendered := rs.Version
	log := v.env.Log.With("target", r.Target, "version", r.Version)
	pr := prior()
	if superseded(r, rs) {
		// The renderer publishes a render before its status names it,
		// so the newer render is in the stream behind this one.
		log.DebugContext(ctx, "render superseded by a newer one already published; that one is validated", "rendered", rs.Version)
		v.m.superseded.WithLabelValues(r.Target).Inc()
		return nil
	}
	st := pr.st
	if pr.err != nil {
		st = msg.ValidationStatus{} // unreadable: no base, every kind checks the whole bundle
	}
	verdict := msg.Validated{Target: r.Target, Version: r.Version, BundleHash: r.BundleHash, At: time.Now().UTC()}
	if pr.cached != nil {
		verdict.OK, verdict.Replies, verdict.Reason, verdict.Cached = pr.cached.OK, pr.cached.Replies, pr.cached.Reason, true
	}
	switch {
	case verdict.Cached:
	case len(kinds) == 0:
		verdict.Reason = "no validator kind is registered (validate.expect: registered) and none is configured"
	default:
		gctx, span := telemetry.Step(ctx, "validator gather")
		res, err := gather.Validate(gctx, v.env.NC, msg.ValidateSubject(r.Target),
			msg.ValidateRequest{Target: r.Target, Version: r.Version, BundleHash: r.BundleHash, Base: fastBase(tc, st, kinds, r.BundleHash)}, kinds, tc.Validate.Timeout.D())
		span.End()
		if err != nil {
			return fmt.Errorf("gather: %w", err)
		}
		if !res.Decided(tc.Validate.MinKinds) {
			return v.undecided(ctx, m, r, res)
		}
		verdict.OK, verdict.Replies, verdict.Missing = res.Accepted(tc.Validate.MinKinds), res.Replies, res.Missing
		verdict.Reason = reason(res, verdict.OK)
		// A provisional acceptance is not cached: only the whole check's
		// verdict is (confirmer).
		verdict.Provisional = verdict.OK && provisional(res.Replies)
		if len(res.Missing) == 0 && !hasErrors(res.Replies) && !verdict.Provisional {
			if data, err := msg.Encode(verdict); err == nil {
				_, _ = v.verdicts.Put(ctx, cacheKey, data)
			}
		}
	}
	outcome := "accepted"
	if !verdict.OK {
		outcome = "refused"
		log.ErrorContext(ctx, "bundle refused; it will not be deployed", "reason", verdict.Reason, "problems", problems(verdict.Replies))
	} else {
		log.InfoContext(ctx, "bundle accepted", "hash", short(r.BundleHash), "cached", verdict.Cached, "provisional", verdict.Provisional)
	}
	if verdict.Cached {
		outcome = "cached-" + outcome
	}
	v.m.verdicts.WithLabelValues(r.Target, outcome).Inc()
	// The status first: the deployer acts on a verdict only once the status
	// confirms it, so this order lets it act at once. A publish that fails
	// after the status is written is retried with the render (the verdict
	// is cached by then, and the status written again is the same).
	rctx, rspan := telemetry.Step(ctx, "validator record")
	defer rspan.End()
	if err := v.writeStatus(rctx, verdict, rendered, &pr); err != nil {
		return err
	}
	if _, err := bus.Publish(rctx, v.env.JS, msg.ValidatedSubject(r.Target), msg.RenderID(r.Target, r.Version), verdict); err != nil {
		return err
	}
	if verdict.Provisional {
		v.confirms.add(confirmJob{target: r.Target, version: r.Version, hash: r.BundleHash, cause: trace.SpanContextFromContext(ctx)})
	}
	return nil
}

// undecided answers a gather without a verdict (kinds that did not answer,
// or could not read the bundle): the render is asked again after a delay
// growing with its deliveries, however often; from the third attempt the
// target's validation status says what it waits for, so a kind that never
// answers is seen in weft status.
func (v *validator) undecided(ctx context.Context, m jetstream.Msg, r msg.Render, res gather.Result) error {
	attempt := uint64(1)
	if meta, err := m.Metadata(); err == nil {
		attempt = meta.NumDelivered
	}
	why := undecidedReason(res)
	v.m.verdicts.WithLabelValues(r.Target, "undecided").Inc()
	v.env.Log.WarnContext(ctx, "no verdict yet; asking the kinds again", "target", r.Target, "version", r.Version, "attempt", attempt, "reason", why)
	if attempt >= 3 {
		if err := v.writeUndecided(ctx, r, fmt.Sprintf("undecided after %d attempts, still asking: %s", attempt, why)); err != nil {
			v.env.Log.WarnContext(ctx, "writing validation status failed", "target", r.Target, "err", err)
		}
	}
	delay := min(time.Duration(1<<min(attempt-1, 5))*time.Second, 30*time.Second)
	return msg.Retry(fmt.Errorf("no verdict on %s v%d: %s", r.Target, r.Version, why), delay)
}

func undecidedReason(res gather.Result) string {
	var parts []string
	if len(res.Missing) > 0 {
		parts = append(parts, "no answer from "+strings.Join(res.Missing, ", "))
	}
	for _, rep := range res.Replies {
		if rep.Error != "" {
			parts = append(parts, rep.Kind+" could not decide: "+rep.Error)
		}
	}
	return strings.Join(parts, "; ")
}

// writeUndecided records in the target's validation status that version r
// waits for a verdict; the last good bundle stays as it was.
func (v *validator) writeUndecided(ctx context.Context, r msg.Render, reason string) error {
	key := msg.ValidationStatusKey(r.Target)
	var st msg.ValidationStatus
	rev, err := msg.LoadStatus(ctx, v.status, key, &st)
	if err != nil && rev == 0 {
		return err
	}
	if r.Version < st.Version {
		return nil
	}
	st.Target, st.Version, st.BundleHash, st.OK, st.Undecided, st.Reason, st.Problems, st.At = r.Target, r.Version, r.BundleHash, false, true, reason, nil, time.Now().UTC()
	data, err := msg.Encode(st)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = v.status.Create(ctx, key, data)
	} else {
		_, err = v.status.Update(ctx, key, data, rev)
	}
	return err
}

// confirm checks a render message against the render status the renderer
// writes right after publishing it, and returns the version that status
// is at. Only a render the status confirms (its version, and its bundle
// hash when it is the newest render) may order the validation status;
// an older one is validated but cannot move the status back. A render
// beyond the renderer's status (a forged message, or a status write still
// on its way) is retried for msg.ConfirmWait, then dead-lettered.
func (v *validator) confirm(ctx context.Context, r msg.Render, age time.Duration) (msg.RenderStatus, error) {
	var rs msg.RenderStatus
	if _, err := msg.LoadStatus(ctx, v.status, msg.RenderStatusKey(r.Target), &rs); err != nil {
		return rs, msg.Retry(err, time.Second)
	}
	switch {
	case r.Version > rs.Version:
		return rs, msg.Unconfirmed(age, "render %s v%d: the renderer's status is at v%d", r.Target, r.Version, rs.Version)
	case r.Version == rs.Version && r.BundleHash != rs.BundleHash:
		return rs, msg.Permanent(fmt.Errorf("%w: render %s v%d names bundle %s, the renderer's status %s",
			msg.ErrUnconfirmed, r.Target, r.Version, short(r.BundleHash), short(rs.BundleHash)))
	}
	return rs, nil
}

// superseded reports whether render r need not be validated: the
// renderer's status rs names a newer version and, as its last good
// bundle, another bundle than r's. The status names a bundle only after a
// render of it was published, and a bundle other than r's only from a
// render published after r, so that render comes after r and is
// validated; a render whose bundle is still the last good one (the
// renders since failed, or came back to it) is validated itself.
func superseded(r msg.Render, rs msg.RenderStatus) bool {
	return rs.Version > r.Version && rs.BundleHash != "" && rs.BundleHash != r.BundleHash
}

// priorState is what a render's validation reads besides the render's
// confirmation: the target's validation status with its revision (err:
// unreadable) and the cached verdict on the bundle (nil: none).
type priorState struct {
	st     msg.ValidationStatus
	rev    uint64
	err    error
	cached *msg.Validated
}

// readPrior starts reading the validation status of target and the
// verdict cached under cacheKey, both at once, and returns the wait for
// them.
func (v *validator) readPrior(ctx context.Context, target, cacheKey string) func() priorState {
	done := make(chan priorState, 1)
	go func() {
		var p priorState
		var wg sync.WaitGroup
		wg.Go(func() {
			if e, err := v.verdicts.Get(ctx, cacheKey); err == nil {
				var cached msg.Validated
				if msg.Decode(e.Value(), &cached) == nil {
					p.cached = &cached
				}
			}
		})
		p.rev, p.err = msg.LoadStatus(ctx, v.status, msg.ValidationStatusKey(target), &p.st)
		wg.Wait()
		done <- p
	}()
	return func() priorState { return <-done }
}

// writeStatus records verdict in the validation status. rendered is the
// version the renderer's status was at when the render was confirmed. A
// validation status beyond it is read against the renderer's status again
// (another replica may have validated a newer render since); one beyond
// that too was written from a message nothing confirmed, and is replaced,
// not trusted to order. The status is updated from prior, read before the
// validation, when it was readable; if it changed since, the write finds
// it changed and the status is read again.
func (v *validator) writeStatus(ctx context.Context, verdict msg.Validated, rendered uint64, prior *priorState) error {
	key := msg.ValidationStatusKey(verdict.Target)
	for {
		var st msg.ValidationStatus
		var rev uint64
		var err error
		if prior != nil && prior.err == nil {
			st, rev = prior.st, prior.rev
		} else if rev, err = msg.LoadStatus(ctx, v.status, key, &st); err != nil && rev == 0 {
			return err
		}
		write, err := v.nextStatus(ctx, &st, verdict, rendered)
		if err != nil || !write {
			return err
		}
		_, err = msg.StoreStatus(ctx, v.status, key, st, rev)
		switch {
		case err == nil:
			return nil
		case prior != nil && prior.err == nil:
			prior = nil // changed since it was read: read it again
		default:
			return msg.Retry(err, 200*time.Millisecond)
		}
	}
}

// nextStatus turns st into the validation status that records verdict,
// and reports whether it is to be written.
func (v *validator) nextStatus(ctx context.Context, st *msg.ValidationStatus, verdict msg.Validated, rendered uint64) (bool, error) {
	if st.Version > rendered {
		var rs msg.RenderStatus
		if _, err := msg.LoadStatus(ctx, v.status, msg.RenderStatusKey(verdict.Target), &rs); err != nil {
			return false, msg.Retry(err, time.Second)
		}
		rendered = max(rendered, rs.Version)
	}
	if st.Version > rendered {
		v.env.Log.WarnContext(ctx, "validation status names a version never rendered; replaced", "target", verdict.Target, "version", st.Version, "rendered", rendered)
		*st = msg.ValidationStatus{}
	}
	if verdict.Version < st.Version {
		// An older render finished late: the newer status stays, but
		// an accepted bundle newer than the last good one is recorded.
		if !verdict.OK || verdict.Version <= st.LastGoodVersion {
			return false, nil
		}
		st.LastGood, st.LastGoodVersion = verdict.BundleHash, verdict.Version
		recordFull(st, verdict)
		return true, nil
	}
	st.Target, st.Version, st.BundleHash, st.OK, st.Undecided, st.Reason, st.At = verdict.Target, verdict.Version, verdict.BundleHash, verdict.OK, false, verdict.Reason, verdict.At
	st.Problems = problems(verdict.Replies)
	if verdict.OK {
		st.LastGood, st.LastGoodVersion = verdict.BundleHash, verdict.Version
		recordFull(st, verdict)
	}
	return true, nil
}

// recordFull records an accepted verdict in the fast path's part of the
// status: a whole check's acceptance is the new base (and ends FullOnly),
// a provisional one is the bundle whose whole check is due.
func recordFull(st *msg.ValidationStatus, verdict msg.Validated) {
	switch {
	case verdict.Provisional && verdict.Version > st.PendingVersion:
		st.Pending, st.PendingVersion = verdict.BundleHash, verdict.Version
	case !verdict.Provisional && verdict.Version > st.LastFullVersion:
		st.LastFull, st.LastFullVersion, st.FullOnly = verdict.BundleHash, verdict.Version, false
		if st.PendingVersion <= verdict.Version {
			st.Pending, st.PendingVersion = "", 0
		}
	}
}

func reason(res gather.Result, ok bool) string {
	var parts []string
	if len(res.Missing) > 0 {
		p := "no answer from " + strings.Join(res.Missing, ", ")
		if ok {
			p = fmt.Sprintf("accepted by %d kinds, the configured minimum; %s", len(res.Replies), p)
		}
		parts = append(parts, p)
	}
	for _, r := range res.Replies {
		switch {
		case r.Error != "":
			parts = append(parts, r.Kind+" could not decide: "+r.Error)
		case !r.OK:
			n := 0
			first := ""
			for _, p := range r.Problems {
				if p.Severity != "warning" {
					if n == 0 {
						first = p.Message
						if p.File != "" {
							first = fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
						}
					}
					n++
				}
			}
			parts = append(parts, fmt.Sprintf("%s refused (%d problems; first: %s)", r.Kind, n, first))
		}
	}
	return strings.Join(parts, "; ")
}

func hasErrors(replies []msg.ValidateReply) bool {
	for _, r := range replies {
		if r.Error != "" {
			return true
		}
	}
	return false
}

func problems(replies []msg.ValidateReply) []msg.Problem {
	var out []msg.Problem
	for _, r := range replies {
		for _, p := range r.Problems {
			p.Message = r.Kind + ": " + p.Message
			out = append(out, p)
		}
	}
	return out
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
