package validator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/services/validator/fastpath"
	"github.com/weftio/weft/services/validator/haproxycheck"
	"github.com/weftio/weft/services/validator/kind"
)

// The fast path. The gatherer names the target's last fully accepted
// bundle (ValidationStatus.LastFull) as the request's Base; a kind that can
// prove the bundle valid from what changed since (prover: the haproxy kind)
// answers provisionally. A provisional verdict is published and deployed at
// once, and recorded as the status's Pending; the whole check of the
// newest pending bundle of each target then runs in the background
// (confirmer). Passing, LastFull moves to it; refused, the status's
// LastGood goes back to LastFull, FullOnly is set (every render is checked
// whole until one is fully accepted) and a verdict with Refutes is
// published, on which the deployer orders LastGood back. Pending lives in
// the status bucket: any replica confirms what a stopped one left.

// prover is a kind that can prove a bundle valid from its differences to a
// bundle it fully accepted.
type prover interface {
	Prove(base, cand msg.Bundle) (fastpath.Result, error)
}

type fastMetrics struct {
	checks  *prometheus.CounterVec
	refuted *prometheus.CounterVec
}

func newFastMetrics(reg prometheus.Registerer) (*fastMetrics, error) {
	m := &fastMetrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_validator_fast_total", Help: "Fast-path outcomes by target: proven (accepted provisionally), full (the whole check was needed), confirmed and refuted (the whole check after a provisional acceptance).",
		}, []string{"target", "outcome"}),
		refuted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_validator_fast_refuted_total", Help: "Provisionally accepted bundles the whole check refused (rolled back to the last fully accepted bundle).",
		}, []string{"target"}),
	}
	return m, svc.Register(reg, Service, m.checks, m.refuted)
}

// bundleCache keeps the few most recently used decoded bundles of each
// target: the base of a fast-path request is almost always the bundle
// checked last.
type bundleCache struct {
	mu       sync.Mutex
	byTarget map[string][]msg.Bundle
}

const bundlesPerTarget = 3

// get returns the bundle and makes it the most recently used.
func (c *bundleCache) get(target, hash string) (msg.Bundle, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.byTarget[target]
	for i, b := range list {
		if b.Hash == hash {
			c.byTarget[target] = append(slices.Delete(list, i, i+1), b)
			return b, true
		}
	}
	return msg.Bundle{}, false
}

func (c *bundleCache) add(target string, b msg.Bundle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byTarget == nil {
		c.byTarget = map[string][]msg.Bundle{}
	}
	list := append(c.byTarget[target], b)
	if len(list) > bundlesPerTarget {
		list = slices.Clone(list[len(list)-bundlesPerTarget:])
	}
	c.byTarget[target] = list
}

// cachedBundle loads a bundle of target through the cache.
func (v *validator) cachedBundle(ctx context.Context, target, hash string) (msg.Bundle, error) {
	if b, ok := v.cache.get(target, hash); ok {
		return b, nil
	}
	b, err := v.bundle(ctx, hash)
	if err != nil {
		return b, err
	}
	if b.Hash == hash {
		v.cache.add(target, b)
	}
	return b, nil
}

// checkBundle answers a bundle request for kind c: provisionally valid when
// the request names a base and c proves the bundle from its differences,
// else by c's whole check.
func (v *validator) checkBundle(ctx context.Context, c kind.Checker, req msg.ValidateRequest) (problems []msg.Problem, provisional bool, err error) {
	if req.Confirm {
		ctx = haproxycheck.Behind(ctx)
	}
	p, fast := c.(prover)
	if !fast || req.Base == "" || req.DryRunObject != "" || req.Base == req.BundleHash {
		b, err := v.bundle(ctx, req.BundleObject())
		if err != nil {
			return nil, false, err
		}
		problems, err = c.Check(ctx, b)
		return problems, false, err
	}
	cand, err := v.cachedBundle(ctx, req.Target, req.BundleHash)
	if err != nil {
		return nil, false, err
	}
	base, berr := v.cachedBundle(ctx, req.Target, req.Base)
	if berr == nil {
		res, perr := p.Prove(base, cand)
		if perr == nil {
			v.fast.checks.WithLabelValues(req.Target, "proven").Inc()
			v.env.Log.DebugContext(ctx, "bundle proven from its runtime values", "target", req.Target, "version", req.Version,
				"servers", res.Servers, "map_lines", res.MapLines, "certs", res.Certs)
			return nil, true, nil
		}
		berr = perr
	}
	v.fast.checks.WithLabelValues(req.Target, "full").Inc()
	v.env.Log.DebugContext(ctx, "fast path not taken; whole check", "target", req.Target, "version", req.Version, "why", berr.Error())
	problems, err = c.Check(ctx, cand)
	return problems, false, err
}

// fastBase is the base a render's request names: the last fully accepted
// bundle, unless validate.fast is off, a refutation asked for whole checks,
// or the haproxy kind is not expected.
func fastBase(tc config.Target, st msg.ValidationStatus, kinds []string, hash string) string {
	if !tc.Validate.FastPath() || st.FullOnly || st.LastFull == "" || st.LastFull == hash || !slices.Contains(kinds, config.KindHAProxy) {
		return ""
	}
	return st.LastFull
}

func provisional(replies []msg.ValidateReply) bool {
	return slices.ContainsFunc(replies, func(r msg.ValidateReply) bool { return r.Provisional })
}

// confirmJob is the whole check due on a provisionally accepted bundle.
// cause is the span of the gather that accepted it provisionally (when
// this replica did): the whole check is part of the same change's trace.
type confirmJob struct {
	target  string
	version uint64
	hash    string
	attempt int
	cause   trace.SpanContext
}

// confirmer holds, per target, the newest bundle whose whole check is due
// (an older one not started yet is superseded: latest wins) and the
// earliest time its next whole check may start.
type confirmer struct {
	mu        sync.Mutex
	jobs      map[string]confirmJob
	notBefore map[string]time.Time
	wake      chan struct{}
}

func newConfirmer() *confirmer {
	return &confirmer{jobs: map[string]confirmJob{}, notBefore: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

func (c *confirmer) add(j confirmJob) {
	c.mu.Lock()
	if cur, ok := c.jobs[j.target]; !ok || j.version >= cur.version {
		c.jobs[j.target] = j
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// next takes a job whose target's whole check may start at now. With
// none, wait is how long until the first job waiting may start (0: no
// job waits).
func (c *confirmer) next(now time.Time) (j confirmJob, wait time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, j := range c.jobs {
		if d := c.notBefore[t].Sub(now); d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		delete(c.jobs, t)
		return j, 0, true
	}
	return confirmJob{}, wait, false
}

// checked records that a whole check of target ran from start to end: the
// next starts no sooner than gap after end, nor sooner than twice the
// check's length after it.
func (c *confirmer) checked(target string, start, end time.Time, gap time.Duration) {
	c.mu.Lock()
	c.notBefore[target] = end.Add(max(gap, 2*end.Sub(start)))
	c.mu.Unlock()
}

// defaultPendingSweep is how often every target's status is read for a
// pending bundle nobody confirms (its replica stopped).
const defaultPendingSweep = 30 * time.Second

// runConfirmer runs the whole checks due, one at a time, until ctx is done.
func (v *validator) runConfirmer(ctx context.Context) error {
	sweep := time.NewTicker(v.pendingSweep)
	defer sweep.Stop()
	v.sweepPending(ctx)
	for {
		var wait time.Duration
		for {
			j, w, ok := v.confirms.next(time.Now())
			if !ok {
				wait = w
				break
			}
			if err := v.confirm1(ctx, j); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				j.attempt++
				delay := min(time.Duration(1<<min(j.attempt, 5))*time.Second/2, 30*time.Second)
				v.env.Log.WarnContext(ctx, "whole check of a provisionally accepted bundle not done; trying again", "target", j.target, "version", j.version, "attempt", j.attempt, "err", err)
				time.AfterFunc(delay, func() { v.confirms.add(j) })
			}
		}
		var due <-chan time.Time
		if wait > 0 {
			due = time.After(wait) // garbage once it fires or is dropped
		}
		select {
		case <-ctx.Done():
			return nil
		case <-v.confirms.wake:
		case <-due:
		case <-sweep.C:
			v.sweepPending(ctx)
		}
	}
}

// sweepPending queues the whole check of every target's pending bundle
// whose status was last written v.pendingSweep ago or more: one the replica
// that accepted it has not confirmed (it stopped, or it is still checking
// it: then the second verdict finds the status done and changes nothing).
func (v *validator) sweepPending(ctx context.Context) {
	for _, name := range v.cfg.TargetNames() {
		var st msg.ValidationStatus
		if _, err := msg.LoadStatus(ctx, v.status, msg.ValidationStatusKey(name), &st); err != nil || st.Pending == "" || time.Since(st.At) < v.pendingSweep {
			continue
		}
		v.confirms.add(confirmJob{target: name, version: st.PendingVersion, hash: st.Pending})
	}
}

// errSuperseded: a newer bundle is pending; this one needs no whole check.
var errSuperseded = errors.New("superseded")

// confirm1 runs the whole check of j's bundle and records its verdict. An
// error means no verdict: j is tried again.
func (v *validator) confirm1(ctx context.Context, j confirmJob) error {
	tc, ok := v.cfg.Targets[j.target]
	if !ok {
		return nil
	}
	if j.cause.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, j.cause)
	}
	ctx, span := v.env.Tracer.Tracer(Service).Start(ctx, "whole check "+j.target,
		trace.WithAttributes(attribute.String("weft.target", j.target), attribute.Int64("weft.version", int64(j.version))))
	defer span.End()
	var st msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, v.status, msg.ValidationStatusKey(j.target), &st); err != nil {
		return err
	}
	if st.Pending != j.hash || st.PendingVersion != j.version {
		return nil // confirmed or refuted already, or superseded by a newer pending bundle
	}
	kinds, err := v.reg.expected(ctx, tc.Validate)
	if err != nil {
		return err
	}
	// Named as checked while still pending, so that the bundle is kept
	// (the deployer's history pruning spares it) however many bundles
	// become pending during the check: accepted, it is the base.
	if st.Checking != j.hash || st.CheckingVersion != j.version {
		err := v.updateStatus(ctx, j.target, func(st *msg.ValidationStatus) bool {
			if st.Pending != j.hash || st.PendingVersion != j.version {
				return false
			}
			st.Checking, st.CheckingVersion = j.hash, j.version
			return true
		})
		if errors.Is(err, errSuperseded) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	start := time.Now()
	res, err := gather.Validate(ctx, v.env.NC, msg.ValidateSubject(j.target),
		msg.ValidateRequest{Target: j.target, Version: j.version, BundleHash: j.hash, Confirm: true}, kinds, tc.Validate.Timeout.D())
	if err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	if !res.Decided(tc.Validate.MinKinds) {
		return errors.New(undecidedReason(res))
	}
	// A check without a verdict is tried again on runConfirmer's own
	// backoff; one with a verdict spaces the next.
	v.confirms.checked(j.target, start, time.Now(), tc.Validate.ConfirmGap.D())
	verdict := msg.Validated{Target: j.target, Version: j.version, BundleHash: j.hash, At: time.Now().UTC(),
		OK: res.Accepted(tc.Validate.MinKinds), Replies: res.Replies, Missing: res.Missing}
	verdict.Reason = reason(res, verdict.OK)
	if len(res.Missing) == 0 && !hasErrors(res.Replies) {
		if data, err := msg.Encode(verdict); err == nil {
			_, _ = v.verdicts.Put(ctx, msg.VerdictKey(j.hash, kinds), data)
		}
	}
	log := v.env.Log.With("target", j.target, "version", j.version, "hash", short(j.hash))
	if verdict.OK {
		// A bundle the whole check accepted is the new base even when a
		// newer one became pending meanwhile (that one stays pending):
		// under changes that come faster than a whole check, the base
		// still moves on, one whole check at a time.
		wasPending := false
		err := v.updateStatus(ctx, j.target, func(st *msg.ValidationStatus) bool {
			wasPending = st.Pending == j.hash && st.PendingVersion == j.version
			newer := j.version > st.LastFullVersion
			checked := doneChecking(st, j)
			if wasPending {
				st.Pending, st.PendingVersion, st.FullOnly = "", 0, false
			}
			if newer {
				st.LastFull, st.LastFullVersion = j.hash, j.version
			}
			return wasPending || newer || checked
		})
		if errors.Is(err, errSuperseded) {
			return nil
		}
		if err == nil {
			v.fast.checks.WithLabelValues(j.target, "confirmed").Inc()
			log.InfoContext(ctx, "provisionally accepted bundle confirmed by the whole check", "newer_pending", !wasPending)
		}
		return err
	}
	return v.refute(ctx, log, j, verdict)
}

// refute withdraws the provisional acceptance of j's bundle, which the
// whole check refused: the status's LastGood goes back to the last fully
// accepted bundle (when it still names j's), renders are checked whole
// until one is fully accepted, and a verdict with Refutes is published.
func (v *validator) refute(ctx context.Context, log interface {
	ErrorContext(context.Context, string, ...any)
}, j confirmJob, verdict msg.Validated) error {
	rolled, wasPending := "", false
	err := v.updateStatus(ctx, j.target, func(st *msg.ValidationStatus) bool {
		checked := doneChecking(st, j)
		wasPending = st.Pending == j.hash && st.PendingVersion == j.version
		if !wasPending {
			// Superseded: the newer pending bundle was proven from the
			// base, not from this one; nothing to withdraw.
			return checked
		}
		st.Pending, st.PendingVersion, st.FullOnly = "", 0, true
		if st.LastGood == j.hash {
			st.LastGood, st.LastGoodVersion = st.LastFull, st.LastFullVersion
			rolled = st.LastFull
		}
		if st.Version == j.version && st.BundleHash == j.hash {
			st.OK, st.Reason, st.Problems = false, "refuted by the whole check after a provisional acceptance: "+verdict.Reason, problems(verdict.Replies)
		}
		return true
	})
	if errors.Is(err, errSuperseded) || (err == nil && !wasPending) {
		return nil
	}
	if err != nil {
		return err
	}
	v.fast.refuted.WithLabelValues(j.target).Inc()
	v.fast.checks.WithLabelValues(j.target, "refuted").Inc()
	log.ErrorContext(ctx, "provisionally accepted bundle refused by the whole check; rolled back to the last fully accepted bundle, renders are checked whole until one is fully accepted",
		"reason", verdict.Reason, "problems", problems(verdict.Replies), "rolled_back_to", short(rolled))
	verdict.Refutes = true
	verdict.Reason = "refuted by the whole check after a provisional acceptance: " + verdict.Reason
	_, err = bus.Publish(ctx, v.env.JS, msg.ValidatedSubject(j.target), msg.RenderID(j.target, j.version)+"-refuted", verdict)
	return err
}

// doneChecking clears the status's Checking when it names j's bundle,
// and reports whether it did.
func doneChecking(st *msg.ValidationStatus, j confirmJob) bool {
	if st.Checking != j.hash || st.CheckingVersion != j.version {
		return false
	}
	st.Checking, st.CheckingVersion = "", 0
	return true
}

// updateStatus applies change to the target's validation status and
// stores it, reading it again when another writer came first. change
// returning false leaves the status as it is (errSuperseded).
func (v *validator) updateStatus(ctx context.Context, target string, change func(*msg.ValidationStatus) bool) error {
	key := msg.ValidationStatusKey(target)
	for attempt := 0; ; attempt++ {
		var st msg.ValidationStatus
		rev, err := msg.LoadStatus(ctx, v.status, key, &st)
		if err != nil {
			return err
		}
		if !change(&st) {
			return errSuperseded
		}
		// (A write whose answer was lost but which landed is done:
		// StoreStatus.)
		if _, err = msg.StoreStatus(ctx, v.status, key, st, rev); err == nil || attempt >= 10 || ctx.Err() != nil {
			return err
		}
	}
}
