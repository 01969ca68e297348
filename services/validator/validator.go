// Package validator decides whether a rendered bundle may be deployed.
//
// It runs two roles. Each validator kind (template, haproxy, syntax,
// policy; a replica can serve a subset, Options.Kinds) answers
// weft.validate.<target> requests in its own queue group, so any number of
// replicas answer once per kind, and keeps a heartbeat per kind in the
// leases bucket. The gatherer consumes render messages from the durable
// consumer "validator" (one replica handles each render), asks the kinds the
// target expects (configured, or every kind with a live heartbeat) and waits
// for all of them or the target's timeout, then publishes the verdict on
// weft.validated.<target> and keeps it in the status bucket. A bundle is
// accepted only when every kind that answered found no error and either all
// expected kinds answered or at least validate.min_kinds did; a kind that
// did not answer is named in the verdict. Complete verdicts are cached by
// bundle hash and kinds, so a bundle seen before is not validated again.
// A render message orders the validation status only when the renderer's
// status confirms it (its version, and its bundle when it is the newest);
// one beyond that status is retried for msg.ConfirmWait and then
// dead-lettered, so a forged render cannot make real versions look old.
package validator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/services/validator/haproxycheck"
	"github.com/weftio/weft/services/validator/kind"
)

// Service is the name in metrics, logs and the DLQ subject.
const Service = "validator"

// ConsumerName is the durable consumer of render messages.
const ConsumerName = "validator"

type metrics struct {
	verdicts *prometheus.CounterVec
	checks   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_validator_verdicts_total", Help: "Gathered verdicts by target and verdict (accepted, refused, cached).",
		}, []string{"target", "verdict"}),
		checks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_validator_check_duration_seconds", Help: "Time one kind took to check a bundle.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"kind"}),
	}
	return m, svc.Register(reg, Service, m.verdicts, m.checks)
}

// Checkers returns every validator kind, the policy kind holding each
// target's rules.
func Checkers(cfg *config.Config) ([]kind.Checker, error) {
	hc, err := haproxycheck.New()
	if err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	policies := kind.TargetPolicies{}
	for name, t := range cfg.Targets {
		policies[name] = t.Validate.Policy
	}
	return []kind.Checker{kind.NewTemplateChecker(cfg), kind.HAProxyChecker{C: hc}, kind.SyntaxChecker{}, policies}, nil
}

type validator struct {
	env      svc.Env
	cfg      *config.Config
	m        *metrics
	reg      *registry
	bundles  jetstream.ObjectStore
	status   jetstream.KeyValue
	verdicts jetstream.KeyValue
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
	all, err := Checkers(cfg)
	if err != nil {
		return err
	}
	var checkers []kind.Checker
	for _, c := range all {
		if slices.Contains(own.Kinds, c.Name()) {
			checkers = append(checkers, c)
		}
	}
	v := &validator{env: env, cfg: cfg, reg: newRegistry(own.HeartbeatTTL)}
	leases, err := env.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	if v.m, err = newMetrics(env.Registry); err != nil {
		return err
	}
	if v.bundles, err = env.JS.ObjectStore(ctx, msg.ObjectBundles); err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	if v.status, err = env.JS.KeyValue(ctx, msg.BucketStatus); err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	if v.verdicts, err = env.JS.KeyValue(ctx, msg.BucketVerdicts); err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	cons, err := env.JS.CreateOrUpdateConsumer(ctx, msg.StreamRenders, jetstream.ConsumerConfig{
		Durable: ConsumerName, Description: "gathers a verdict for every render",
		FilterSubject: msg.RenderAll, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxDeliver: 20, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("validator: consumer: %w", err)
	}
	bm, err := bus.NewMetrics(Service, env.Registry)
	if err != nil {
		return err
	}
	opts := bus.Options{Service: Service, Log: env.Log, Tracer: env.Tracer.Tracer(Service), Metrics: bm, DLQ: env.JS, AckWait: time.Minute}
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range checkers {
		o := opts
		o.Stage = "validate-" + c.Name()
		g.Go(func() error {
			return bus.Serve(ctx, env.NC, msg.ValidateAll, "weft-validator-"+c.Name(), v.answer(c), o)
		})
	}
	g.Go(func() error { return beat(ctx, leases, env.Replica, own.Kinds, own.HeartbeatTTL, env.Log) })
	g.Go(func() error { return v.reg.follow(ctx, leases) })
	renders := opts
	renders.Stage = "renders"
	g.Go(func() error { return bus.Consume(ctx, cons, v.onRender, renders) })
	return g.Wait()
}

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
			var b msg.Bundle
			if b, err = v.bundle(ctx, req.BundleHash); err == nil {
				reply.Problems, err = c.Check(ctx, b)
			}
		}
		reply.Duration = time.Since(start)
		v.m.checks.WithLabelValues(c.Name()).Observe(reply.Duration.Seconds())
		if err != nil {
			reply.Error = err.Error()
		} else {
			reply.OK = !kind.Failed(reply.Problems)
		}
		if m.Reply != "" {
			if out, eerr := msg.NewMsg(m.Reply, "", reply); eerr == nil {
				_ = m.RespondMsg(out)
			}
		}
		return err
	}
}

func (v *validator) bundle(ctx context.Context, hash string) (msg.Bundle, error) {
	data, err := v.bundles.GetBytes(ctx, hash)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return msg.Bundle{}, msg.Permanent(fmt.Errorf("bundle %s not in the object store", hash))
	}
	if err != nil {
		return msg.Bundle{}, fmt.Errorf("read bundle %s: %w", hash, err)
	}
	return msg.DecodeBundle(data)
}

func (v *validator) config(ctx context.Context, hash string) (msg.Config, error) {
	var c msg.Config
	data, err := v.bundles.GetBytes(ctx, msg.ConfigObject(hash))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return c, msg.Permanent(fmt.Errorf("configuration %s not in the object store", hash))
	}
	if err != nil {
		return c, fmt.Errorf("read configuration %s: %w", hash, err)
	}
	return c, msg.Decode(data, &c)
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
	rendered, err := v.confirm(ctx, r, msg.AgeOf(m.Metadata()))
	if err != nil {
		return err
	}
	log := v.env.Log.With("target", r.Target, "version", r.Version)
	kinds, err := v.reg.expected(ctx, tc.Validate)
	if err != nil {
		return err
	}
	verdict := msg.Validated{Target: r.Target, Version: r.Version, BundleHash: r.BundleHash, At: time.Now().UTC()}
	cacheKey := msg.VerdictKey(r.BundleHash, kinds)
	if e, err := v.verdicts.Get(ctx, cacheKey); err == nil {
		var cached msg.Validated
		if msg.Decode(e.Value(), &cached) == nil {
			verdict.OK, verdict.Replies, verdict.Reason, verdict.Cached = cached.OK, cached.Replies, cached.Reason, true
		}
	}
	switch {
	case verdict.Cached:
	case len(kinds) == 0:
		verdict.Reason = "no validator kind is registered (validate.expect: registered) and none is configured"
	default:
		res, err := gather.Validate(ctx, v.env.NC, msg.ValidateSubject(r.Target),
			msg.ValidateRequest{Target: r.Target, Version: r.Version, BundleHash: r.BundleHash}, kinds, tc.Validate.Timeout.D())
		if err != nil {
			return fmt.Errorf("gather: %w", err)
		}
		verdict.OK, verdict.Replies, verdict.Missing = res.Accepted(tc.Validate.MinKinds), res.Replies, res.Missing
		verdict.Reason = reason(res, verdict.OK)
		if len(res.Missing) == 0 && !hasErrors(res.Replies) {
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
		log.InfoContext(ctx, "bundle accepted", "hash", short(r.BundleHash), "cached", verdict.Cached)
	}
	if verdict.Cached {
		outcome = "cached-" + outcome
	}
	v.m.verdicts.WithLabelValues(r.Target, outcome).Inc()
	if _, err := bus.Publish(ctx, v.env.JS, msg.ValidatedSubject(r.Target), msg.RenderID(r.Target, r.Version), verdict); err != nil {
		return err
	}
	return v.writeStatus(ctx, verdict, rendered)
}

// confirm checks a render message against the render status the renderer
// writes right after publishing it, and returns the version that status
// is at. Only a render the status confirms (its version, and its bundle
// hash when it is the newest render) may order the validation status;
// an older one is validated but cannot move the status back. A render
// beyond the renderer's status (a forged message, or a status write still
// on its way) is retried for msg.ConfirmWait, then dead-lettered.
func (v *validator) confirm(ctx context.Context, r msg.Render, age time.Duration) (uint64, error) {
	var rs msg.RenderStatus
	if _, err := msg.LoadStatus(ctx, v.status, msg.RenderStatusKey(r.Target), &rs); err != nil {
		return 0, msg.Retry(err, time.Second)
	}
	switch {
	case r.Version > rs.Version:
		return 0, msg.Unconfirmed(age, "render %s v%d: the renderer's status is at v%d", r.Target, r.Version, rs.Version)
	case r.Version == rs.Version && r.BundleHash != rs.BundleHash:
		return 0, msg.Permanent(fmt.Errorf("%w: render %s v%d names bundle %s, the renderer's status %s",
			msg.ErrUnconfirmed, r.Target, r.Version, short(r.BundleHash), short(rs.BundleHash)))
	}
	return rs.Version, nil
}

// writeStatus records verdict in the validation status. A status beyond
// the version the renderer's status is at (rendered) was written from a
// message nothing confirmed; it is replaced, not trusted to order.
func (v *validator) writeStatus(ctx context.Context, verdict msg.Validated, rendered uint64) error {
	key := msg.ValidationStatusKey(verdict.Target)
	var st msg.ValidationStatus
	rev, err := msg.LoadStatus(ctx, v.status, key, &st)
	if err != nil && rev == 0 {
		return err
	}
	if st.Version > rendered {
		v.env.Log.WarnContext(ctx, "validation status names a version never rendered; replaced", "target", verdict.Target, "version", st.Version, "rendered", rendered)
		st = msg.ValidationStatus{}
	}
	if verdict.Version < st.Version {
		// An older render finished late: the newer status stays, but
		// an accepted bundle newer than the last good one is recorded.
		if !verdict.OK || verdict.Version <= st.LastGoodVersion {
			return nil
		}
		st.LastGood, st.LastGoodVersion = verdict.BundleHash, verdict.Version
		if _, err := msg.StoreStatus(ctx, v.status, key, st, rev); err != nil {
			return msg.Retry(err, 200*time.Millisecond)
		}
		return nil
	}
	st.Target, st.Version, st.BundleHash, st.OK, st.Reason, st.At = verdict.Target, verdict.Version, verdict.BundleHash, verdict.OK, verdict.Reason, verdict.At
	st.Problems = problems(verdict.Replies)
	if verdict.OK {
		st.LastGood, st.LastGoodVersion = verdict.BundleHash, verdict.Version
	}
	if _, err := msg.StoreStatus(ctx, v.status, key, st, rev); err != nil {
		return msg.Retry(err, 200*time.Millisecond)
	}
	return nil
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
