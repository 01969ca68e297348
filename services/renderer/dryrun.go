package renderer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/svc/gather"
)

// ErrUndecided is a dry run that reached no verdict: validator kinds that
// did not answer or could not decide, a state not synced yet, the time
// given running out. The webhook answers it with the failure policy.
var ErrUndecided = errors.New("undecided")

// proposal is one object a dry run puts in place of what the state holds.
type proposal struct {
	id     string // the admission request's uid: names the dry-run objects
	typ    string // watched type
	key    string // resource key in the resources bucket
	name   string // namespace/name, or name
	object map[string]any
}

// refusal is what a dry run found against a proposal, per target.
type refusal struct {
	target   string
	problems []string // "kind: file:line: message", or a render error
}

// dryRun renders every template target with p in place and validates
// each bundle by the same scatter-gather as a real render, without
// publishing, caching or deploying anything. It returns the refusals
// caused by p: a target refused with p is compared with the same target
// rendered from the state without it, so problems the state has already
// are not held against p.
func (r *renderer) dryRun(ctx context.Context, p proposal) ([]refusal, error) {
	select {
	case <-r.synced:
	default:
		return nil, fmt.Errorf("%w: the renderer has not read every source's objects yet", ErrUndecided)
	}
	base, with, err := r.overlay(p)
	if err != nil {
		return nil, err
	}
	var (
		mu  sync.Mutex
		out []refusal
	)
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range r.cfg.TargetNames() {
		tc := r.cfg.Targets[name]
		if tc.ConfdResource != nil || r.targets[name].compile != nil {
			continue // reads values only; or does not compile, which the render status says
		}
		g.Go(func() error {
			problems, err := r.dryRunTarget(gctx, name, tc, p, base, with)
			if err != nil {
				return fmt.Errorf("target %s: %w", name, err)
			}
			if len(problems) > 0 {
				mu.Lock()
				out = append(out, refusal{target: name, problems: problems})
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b refusal) int { return strings.Compare(a.target, b.target) })
	return out, nil
}

// overlay copies the index (the resources bucket as this replica follows
// it) twice: as it is, and with p in place.
func (r *renderer) overlay(p proposal) (base, with *index.Index, err error) {
	var top uint64
	r.ix.Read(func(rev uint64) {
		top = rev
		base, with = r.ix.Clone(), r.ix.Clone()
	})
	if with.Store(p.typ) == nil {
		return nil, nil, fmt.Errorf("type %s is not indexed", p.typ)
	}
	// An object the same as the one stored is no change: with is base.
	with.Upsert(p.typ, p.key, top+1, p.object)
	return base, with, nil
}

// dryRunTarget returns the problems p causes in one target.
func (r *renderer) dryRunTarget(ctx context.Context, name string, tc config.Target, p proposal, base, with *index.Index) ([]string, error) {
	res, rerr := r.renderOn(ctx, name, tc, with)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrUndecided, ctx.Err())
	}
	var baseRes *target.Result
	var baseErr error
	baseline := func() (target.Result, error) {
		if baseRes == nil {
			res, err := r.renderOn(ctx, name, tc, base)
			baseRes, baseErr = &res, err
		}
		return *baseRes, baseErr
	}
	if rerr != nil {
		if _, err := baseline(); err != nil {
			return nil, nil // fails without p too: not p's doing
		}
		return []string{"render: " + rerr.Error()}, nil
	}
	var out []string
	if own := objectErrors(res.Errors, p); len(own) > 0 {
		b, err := baseline()
		had := map[string]bool{}
		if err == nil {
			for _, m := range objectErrors(b.Errors, p) {
				had[m] = true
			}
		}
		for _, m := range own {
			if !had[m] {
				out = append(out, "template: "+m)
			}
		}
	}
	verdict, err := r.validateDry(ctx, name, tc, p.id, res.Bundle)
	if err != nil {
		return nil, err
	}
	if verdict == nil {
		return out, nil // accepted
	}
	b, err := baseline()
	switch {
	case err != nil:
		// The state does not render without p either; p's bundle is
		// refused on its own merits.
		return append(out, verdict...), nil
	case b.Bundle.Hash == res.Bundle.Hash:
		return out, nil // p changes nothing in this target
	}
	before, err := r.validateDry(ctx, name, tc, p.id+"-base", b.Bundle)
	if err != nil {
		return nil, err
	}
	had := map[string]bool{}
	for _, m := range before {
		had[withoutLine(m)] = true
	}
	for _, m := range verdict {
		if !had[withoutLine(m)] {
			out = append(out, m)
		}
	}
	return out, nil
}

// renderOn renders a freshly compiled copy of the target (no fragment or
// output cache shared with the real renders) over ix.
func (r *renderer) renderOn(ctx context.Context, name string, tc config.Target, ix *index.Index) (target.Result, error) {
	t, err := target.Compile(name, tc)
	if err != nil {
		return target.Result{}, err
	}
	resources := ix.Stores()
	delete(resources, config.ValuesType)
	return t.RenderFetching(ctx, resources, valuesOf(ix), r.fetch)
}

// objectErrors are the messages of the resource errors (register_error)
// naming p: by its id in the index (the key), or by namespace/name.
func objectErrors(errs []msg.ResourceError, p proposal) []string {
	var out []string
	for _, e := range errs {
		if e.Type == p.typ && (e.ID == p.key || e.ID == p.name) {
			out = append(out, e.Message)
		}
	}
	return out
}

// validateDry stores b under a dry-run name, asks the target's expected
// kinds about it and removes it. It returns nil when b is accepted, the
// problems when it is refused, and ErrUndecided without a verdict.
func (r *renderer) validateDry(ctx context.Context, name string, tc config.Target, id string, b msg.Bundle) ([]string, error) {
	kinds, err := r.expectedKinds(ctx, tc.Validate)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUndecided, err)
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("%w: no validator kind is registered (validate.expect: registered) and none is configured", ErrUndecided)
	}
	obj := msg.DryRunObjectName(id + "-" + name)
	if err := r.bundles.PutBundle(ctx, obj, b); err != nil {
		return nil, fmt.Errorf("%w: store the dry run's bundle: %w", ErrUndecided, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := r.bundles.Delete(dctx, obj); err != nil {
			r.env.Log.Warn("webhook: the dry run's bundle was not removed; it expires with the store's TTL", "object", obj, "err", err)
		}
	}()
	timeout := tc.Validate.Timeout.D()
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	res, err := gather.Validate(ctx, r.env.NC, msg.ValidateSubject(name),
		msg.ValidateRequest{Target: name, BundleHash: b.Hash, DryRunObject: obj}, kinds, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUndecided, err)
	}
	if !res.Decided(tc.Validate.MinKinds) {
		return nil, fmt.Errorf("%w: %s", ErrUndecided, undecidedWhy(res))
	}
	if res.Accepted(tc.Validate.MinKinds) {
		return nil, nil
	}
	var out []string
	for _, rep := range res.Replies {
		for _, pr := range rep.Problems {
			if pr.Severity == "warning" {
				continue
			}
			m := pr.Message
			if pr.File != "" {
				m = fmt.Sprintf("%s:%d: %s", pr.File, pr.Line, pr.Message)
			}
			out = append(out, rep.Kind+": "+m)
		}
		if !rep.OK && rep.Error == "" && len(rep.Problems) == 0 {
			out = append(out, rep.Kind+": refused")
		}
	}
	if len(out) == 0 { // refused for a reason without problems (a minimum of kinds not met)
		out = append(out, undecidedWhy(res))
	}
	return out, nil
}

// withoutLine drops the line number of "kind: file:line: message": the
// same problem moves when the proposed object adds lines before it.
func withoutLine(m string) string {
	kind, rest, ok := strings.Cut(m, ": ")
	if !ok {
		return m
	}
	file, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return m
	}
	if _, msgText, ok := strings.Cut(rest, ": "); ok {
		return kind + ": " + file + ": " + msgText
	}
	return m
}

func undecidedWhy(res gather.Result) string {
	var parts []string
	if len(res.Missing) > 0 {
		parts = append(parts, "no answer from "+strings.Join(res.Missing, ", "))
	}
	for _, rep := range res.Replies {
		if rep.Error != "" {
			parts = append(parts, rep.Kind+" could not decide: "+rep.Error)
		}
	}
	if len(parts) == 0 {
		return "too few validator kinds accepted"
	}
	return strings.Join(parts, "; ")
}

// expectedKinds are the kinds a target's bundles wait for: the configured
// ones, and with validate.expect: registered every kind with a live
// heartbeat in the leases bucket.
func (r *renderer) expectedKinds(ctx context.Context, v config.Validate) ([]string, error) {
	kinds := slices.Clone(v.Kinds)
	if v.Expect == config.ExpectRegistered {
		keys, err := r.leases.ListKeysFiltered(ctx, msg.KindHeartbeatPrefix+">")
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, fmt.Errorf("validator heartbeats: %w", err)
		}
		if keys != nil {
			for k := range keys.Keys() {
				e, err := r.leases.Get(ctx, k)
				if err != nil || time.Since(e.Created()) > msg.LeaseTTL {
					continue
				}
				if kind, ok := msg.KindOfHeartbeatKey(k); ok {
					kinds = append(kinds, kind)
				}
			}
		}
	}
	slices.Sort(kinds)
	return slices.Compact(kinds), nil
}

// valuesOf are the values of an index by name, as templates see them.
func valuesOf(ix *index.Index) map[string]any {
	items := ix.Store(config.ValuesType).Items()
	out := make(map[string]any, len(items))
	for _, it := range items {
		obj := it.Object()
		if name, _ := obj["name"].(string); name != "" {
			out[name] = obj["value"]
		}
	}
	return out
}
