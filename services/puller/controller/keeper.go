package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
)

// ErrNotKept: the replica has not yet held the slots of the pull Jobs
// already running (its first keeping pass did not end), so it starts none.
var ErrNotKept = errors.New("the slots of the running pull Jobs are not held yet")

// listTimeout bounds a keeping pass's listing of the pull Jobs.
const listTimeout = 10 * time.Second

// keptWait bounds how long a look that would start a pull Job waits for
// the first keeping pass before it is retried.
const keptWait = 10 * time.Second

// keeper holds, in every replica, the slots of every pull Job the
// resources bucket shows running: a pass every third of the slot TTL
// adopts them by the Job's name (taking them again if they lapsed), so
// the slots of a Job outlive the replica that started it however many
// replicas die, and frees the copies of Jobs that ended or are gone.
type keeper struct {
	every time.Duration
	ready chan struct{} // closed when the first pass ended

	// listed are the Jobs the last pass saw running, by name.
	listed map[string]bool
}

func newKeeper(ttl time.Duration) *keeper {
	return &keeper{every: ttl / 3, ready: make(chan struct{}), listed: map[string]bool{}}
}

// wait returns once the first pass ended, or ErrNotKept after keptWait.
func (k *keeper) wait(ctx context.Context) error {
	select {
	case <-k.ready:
		return nil
	default:
	}
	t := time.NewTimer(keptWait)
	defer t.Stop()
	select {
	case <-k.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return ErrNotKept
	}
}

// keepLoop runs a keeping pass at once and every third of the slot TTL
// until ctx is done; a pass that failed is run again sooner.
func (c *controller) keepLoop(ctx context.Context) {
	first := true
	for {
		err := c.keepPass(ctx)
		next := c.keeper.every
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.env.Log.WarnContext(ctx, "holding the slots of running pull Jobs failed; will retry", "err", err)
			next = c.keeper.every / 4
		case first:
			first = false
			close(c.keeper.ready)
			c.env.Log.InfoContext(ctx, "holding the slots of the running pull Jobs", "jobs", len(c.keeper.listed))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// keepPass holds the slots of every pull Job the resources bucket shows
// running, and frees those held here for Jobs it shows ended or that it
// showed before and no longer does. A Job held here that the bucket never
// showed is being started: its PrePullImage's look frees it (sweep).
func (c *controller) keepPass(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	objs, bad, err := c.objs.scan(lctx, c.cfg.Types.Jobs)
	cancel()
	if err != nil {
		return err
	}
	for _, err := range bad {
		c.env.Log.WarnContext(ctx, "a pull Job in the resources bucket cannot be read; its slots are not kept", "err", err)
	}
	running := map[string]bool{}
	ended := map[string]bool{}
	specs := map[string]*imageLimits{} // by PrePullImage namespace/name
	var errs []error
	for _, obj := range objs {
		var j batchv1.Job
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &j); err != nil {
			continue
		}
		if jobEnded(&j) {
			ended[j.Name] = true
			continue
		}
		running[j.Name] = true
		owner := ownerImage(&j)
		if owner == "" {
			continue
		}
		key := j.Namespace + "/" + owner
		il, ok := specs[key]
		if !ok {
			if il, err = c.imageLimits(ctx, j.Namespace, owner); err != nil {
				errs = append(errs, err)
				continue
			}
			specs[key] = il
		}
		if il == nil {
			// Its PrePullImage or policy is gone: nothing says its limits,
			// and the Job goes with its PrePullImage.
			continue
		}
		node := j.Annotations[job.AnnotationNode]
		err := c.hold(ctx, key, j.Name, limits(il.ppi, il.spec, node))
		switch {
		case err == nil:
		case errors.Is(err, slots.ErrFull):
			c.env.Log.WarnContext(ctx, "a running pull Job's slot was taken by another", "job", j.Namespace+"/"+j.Name, "err", err)
		case errors.Is(err, slots.ErrInvalid):
			// Asking again cannot help: say so, and let the pass count.
			c.env.Log.WarnContext(ctx, "a running pull Job's slots cannot be held", "job", j.Namespace+"/"+j.Name, "err", err)
		default:
			// Unanswered: the pass fails, and a replica whose first pass
			// failed starts no Job.
			errs = append(errs, fmt.Errorf("hold the slots of pull Job %s/%s: %w", j.Namespace, j.Name, err))
		}
	}
	c.mu.Lock()
	var done []*slots.Held
	for name, hj := range c.held {
		if ended[name] || (c.keeper.listed[name] && !running[name]) {
			done = append(done, hj.h)
			delete(c.held, name)
		}
	}
	c.mu.Unlock()
	for _, h := range done {
		h.Release()
	}
	c.keeper.listed = running
	return errors.Join(errs...)
}

// imageLimits are what a PrePullImage's pull Jobs' limits are made of.
type imageLimits struct {
	ppi  *v1alpha1.PrePullImage
	spec *v1alpha1.PrePullPolicySpec
}

// imageLimits reads the PrePullImage namespace/name and its policy from
// the bucket; nil when either is gone or the policy is invalid.
func (c *controller) imageLimits(ctx context.Context, namespace, name string) (*imageLimits, error) {
	obj, err := c.objs.get(ctx, c.cfg.Types.Images, namespace, name)
	if err != nil || obj == nil {
		return nil, err
	}
	var ppi v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(obj, &ppi); err != nil {
		return nil, nil
	}
	spec, err := c.policySpec(ctx, &ppi)
	if err != nil || spec == nil {
		return nil, err
	}
	return &imageLimits{ppi: &ppi, spec: spec}, nil
}

// jobEnded reports a Job whose Complete or Failed condition is true.
func jobEnded(j *batchv1.Job) bool {
	for _, cond := range j.Status.Conditions {
		if cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}

// ownerImage is the name of the PrePullImage that owns a pull Job, or "".
func ownerImage(j *batchv1.Job) string {
	for _, ref := range j.OwnerReferences {
		if ref.Kind == v1alpha1.ImageKind && ref.APIVersion == v1alpha1.GroupVersion.String() {
			return ref.Name
		}
	}
	return ""
}

// scan returns every object of type typ as the bucket holds it, read in
// one pass over the bucket's stream (one watch, not one read per key), and
// the values it could not decode (bad), which it leaves out. A listing
// cut short is an error, never a shorter list: a Job missing from it
// would pass for one gone.
func (o objects) scan(ctx context.Context, typ string) (out []map[string]any, bad []error, err error) {
	w, err := msg.Watch(ctx, o.kv, []string{msg.ResourcePrefix(o.source, typ) + "*.*"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", typ, err)
	}
	defer msg.StopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("list %s: %w", typ, ctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, nil, fmt.Errorf("list %s: the watch ended before the listing did", typ)
			case e == nil:
				// Every value held when the watch began was delivered.
				return out, bad, nil
			}
			var r msg.Resource
			if err := msg.Decode(e.Value(), &r); err != nil {
				bad = append(bad, fmt.Errorf("%s: %w", e.Key(), err))
				continue
			}
			out = append(out, r.Object)
		}
	}
}
