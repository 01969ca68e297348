package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
	"github.com/weftio/weft/services/puller/pull"
	"github.com/weftio/weft/services/puller/workload"
)

// reconcileImages looks at every PrePullImage and refreshes the gauges of
// PrePullImages by phase and of active and queued pulls.
func (c *controller) reconcileImages(ctx context.Context) error {
	// The pull status keys are listed before the PrePullImages: a key's
	// PrePullImage was in the bucket before its orders went out, so one
	// missing from the later listing is gone.
	keys, err := c.pullStatusKeys(ctx)
	if err != nil {
		return err
	}
	objs, err := c.objs.list(ctx, c.cfg.Types.Images)
	if err != nil {
		return err
	}
	phases := map[v1alpha1.ImagePhase]int{}
	active, queued := map[v1alpha1.PullMode]int{}, map[v1alpha1.PullMode]int{}
	var errs []error
	present := map[string]bool{}
	for _, obj := range objs {
		var ppi v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(obj, &ppi); err != nil {
			continue
		}
		present[ppi.Namespace+"/"+ppi.Name] = true
		phases[ppi.Status.Phase]++
		for _, n := range ppi.Status.Nodes {
			switch n.Phase {
			case v1alpha1.NodePulling:
				active[ppi.Spec.Mode]++
			case v1alpha1.NodePending:
				queued[ppi.Spec.Mode]++
			}
		}
		errs = append(errs, c.reconcileImage(ctx, ppi.Namespace, ppi.Name))
	}
	c.sweepGone(present)
	errs = append(errs, c.collectPullStatus(ctx, keys, present))
	for _, p := range []v1alpha1.ImagePhase{v1alpha1.ImagePending, v1alpha1.ImageInProgress, v1alpha1.ImageCompleted, v1alpha1.ImageFailed} {
		c.metrics.images.WithLabelValues(string(p)).Set(float64(phases[p]))
	}
	for _, m := range []v1alpha1.PullMode{v1alpha1.ModeCRI, v1alpha1.ModeJob} {
		c.metrics.active.WithLabelValues(string(m)).Set(float64(active[m]))
		c.metrics.queued.WithLabelValues(string(m)).Set(float64(queued[m]))
	}
	return errors.Join(errs...)
}

// keyLocks serialize a replica's looks at one PrePullImage (changes,
// outcomes and timers arrive together); a key's lock exists while it is
// held or waited for.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu      sync.Mutex
	waiting int
}

func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.waiting++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.waiting--; l.waiting == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// reconcileImage takes the next step of one PrePullImage.
func (c *controller) reconcileImage(ctx context.Context, namespace, name string) error {
	defer c.locks.lock(namespace + "/" + name)()
	obj, err := c.objs.get(ctx, c.cfg.Types.Images, namespace, name)
	if err != nil || obj == nil {
		return err
	}
	var ppi v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(obj, &ppi); err != nil {
		return msg.Permanent(err)
	}
	switch {
	case ppi.DeletionTimestamp != nil:
		return c.finalize(ctx, &ppi)
	case !slices.Contains(ppi.Finalizers, Finalizer):
		ppi.Finalizers = append(ppi.Finalizers, Finalizer)
		return c.update(ctx, &ppi)
	}
	spec, err := c.policySpec(ctx, &ppi)
	if err != nil || spec == nil {
		return err
	}
	observed, err := c.observe(ctx, &ppi, spec)
	if err != nil {
		return err
	}
	plan := pull.Step(&ppi, spec, observed, c.cfg.Now())
	if plan.Expired {
		c.env.Log.InfoContext(ctx, "PrePullImage completed and its TTL is over; deleting it", "prepullimage", namespace+"/"+name, "ttl", spec.TTL.Duration)
		return c.deleteImage(ctx, &ppi)
	}
	if err := c.step(ctx, &ppi, spec, &plan); err != nil {
		return err
	}
	if !plan.Wake.IsZero() {
		c.wake.at(namespace, name, plan.Wake)
	}
	return nil
}

// step carries plan out. The new status is written first, with the
// resourceVersion read, so that of replicas acting on one state only the
// one whose write lands acts: it claims the attempts it starts (pull
// Jobs hold their slots before), then starts them; an attempt that
// cannot start is written back as Pending. Ended attempts are counted and
// free their slots, and the Jobs of failed attempts are deleted, once
// the status recording them landed. Pull Jobs start only once the
// keeping pass holds those already running, and claimed attempts whose
// Job was never created get it (resumeJobs).
func (c *controller) step(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, plan *pull.Plan) error {
	if ppi.Spec.Mode == v1alpha1.ModeJob && len(plan.Start) > 0 {
		// No Job starts before the slots of those already running are
		// held here: slots that lapsed while no replica ran are taken
		// again by those Jobs first.
		if err := c.keeper.wait(ctx); err != nil {
			return err
		}
		c.holdSlots(ctx, ppi, spec, plan)
	}
	next, err := c.writeStatus(ctx, ppi, plan.Status)
	if err != nil || next == nil {
		return err
	}
	if deferred := c.start(ctx, next, spec, plan); deferred {
		if next, err = c.writeStatus(ctx, next, plan.Status); err != nil || next == nil {
			return err
		}
	}
	c.ended(ctx, next, spec, plan.Ended)
	if ppi.Spec.Mode != v1alpha1.ModeJob {
		return nil
	}
	live := map[string]bool{}
	for _, n := range plan.Status.Nodes {
		if n.Phase == v1alpha1.NodePulling {
			live[job.Name(next, n.Node, n.Attempts)] = true
		}
	}
	started := map[string]bool{}
	for _, s := range plan.Start {
		started[s.Node] = true
	}
	resumed := c.resumeJobs(ctx, next, spec, started)
	c.sweep(ppi.Namespace+"/"+ppi.Name, live)
	return errors.Join(resumed, c.deleteFailedJobs(ctx, next, plan.Status.Nodes))
}

// writeStatus writes status as ppi's, unless it is what ppi has, and
// returns ppi as written (ppi itself when nothing was written; nil when it
// is gone).
func (c *controller) writeStatus(ctx context.Context, ppi *v1alpha1.PrePullImage, status v1alpha1.PrePullImageStatus) (*v1alpha1.PrePullImage, error) {
	if reflect.DeepEqual(statusJSON(ppi.Status), statusJSON(status)) {
		return ppi, nil
	}
	next := *ppi
	next.Status = status
	written, err := c.updateStatus(ctx, &next)
	if err != nil || written == nil {
		return nil, err
	}
	if written.Status.Phase != ppi.Status.Phase {
		c.env.Log.InfoContext(ctx, "PrePullImage "+string(written.Status.Phase), "prepullimage", ppi.Namespace+"/"+ppi.Name,
			"pulled", written.Status.NodesPulled, "failed", written.Status.NodesFailed, "nodes", written.Status.NodesTotal)
	}
	return written, nil
}

// statusJSON is a status as it is stored, for comparison (times at the
// second, as the API server keeps them).
func statusJSON(s v1alpha1.PrePullImageStatus) map[string]any {
	u, _ := v1alpha1.ToUnstructured(&v1alpha1.PrePullImage{Status: s})
	st, _ := u["status"].(map[string]any)
	return st
}

// policySpec is the defaulted spec of the PrePullImage's policy, or nil
// when it is gone or invalid: nothing is pulled meanwhile.
func (c *controller) policySpec(ctx context.Context, ppi *v1alpha1.PrePullImage) (*v1alpha1.PrePullPolicySpec, error) {
	obj, err := c.objs.get(ctx, c.cfg.Types.Policies, "", ppi.Spec.Policy)
	if err != nil || obj == nil {
		return nil, err
	}
	var p v1alpha1.PrePullPolicy
	if err := v1alpha1.FromUnstructured(obj, &p); err != nil {
		return nil, nil
	}
	spec := p.Spec
	spec.Default()
	if errs := v1alpha1.ValidatePolicy(&spec); len(errs) > 0 {
		return nil, nil
	}
	return &spec, nil
}

// observe reads the current attempt of every Pulling node: a pull Job's
// from the resources bucket, an agent's from weft-pulls.
func (c *controller) observe(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec) (map[string]pull.Attempt, error) {
	out := map[string]pull.Attempt{}
	images := workload.UniqueImages(ppi.Spec.Images)
	var agents map[string][]byte // pull status by node
	if ppi.Spec.Mode != v1alpha1.ModeJob {
		var err error
		if agents, err = c.agentStatus(ctx, ppi); err != nil {
			return nil, err
		}
	}
	for _, n := range ppi.Status.Nodes {
		if n.Phase != v1alpha1.NodePulling {
			continue
		}
		var (
			a   pull.Attempt
			err error
		)
		if ppi.Spec.Mode == v1alpha1.ModeJob {
			a, err = c.observeJob(ctx, ppi, spec, n)
		} else {
			a, err = observeAgent(ppi, n, images, agents[n.Node])
		}
		if err != nil {
			return nil, err
		}
		out[n.Node] = a
	}
	return out, nil
}

// readAllFrom is the number of nodes from which agentStatus reads every
// key of a PrePullImage in one watch (a consumer made and deleted, about
// the cost of five Gets on one server, more in a cluster) rather than a
// Get per node.
const readAllFrom = 16

// agentStatus reads the node agents' pull status of ppi's Pulling nodes,
// by node: with a Get each for a few, in one read of every key of ppi
// for more, so that an outcome's look does not cost a request per node
// still pulling.
func (c *controller) agentStatus(ctx context.Context, ppi *v1alpha1.PrePullImage) (map[string][]byte, error) {
	var pulling []string
	for _, n := range ppi.Status.Nodes {
		if n.Phase == v1alpha1.NodePulling {
			pulling = append(pulling, n.Node)
		}
	}
	out := make(map[string][]byte, len(pulling))
	if len(pulling) < readAllFrom {
		for _, node := range pulling {
			e, err := c.pulls.Get(ctx, msg.PullStatusKey(ppi.Namespace, ppi.Name, node))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read the pull status of %s/%s on %s: %w", ppi.Namespace, ppi.Name, node, err)
			}
			out[node] = e.Value()
		}
		return out, nil
	}
	values, err := lastValues(ctx, c.pulls, msg.PullStatusPrefix(ppi.Namespace, ppi.Name)+"*")
	if err != nil {
		return nil, fmt.Errorf("read the pull status of %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	for k, v := range values {
		if _, _, node, err := msg.ParsePullStatusKey(k); err == nil {
			out[node] = v
		}
	}
	return out, nil
}

// observeAgent reads the node agent's status (value, nil for none) of the
// node's attempt.
func observeAgent(ppi *v1alpha1.PrePullImage, n v1alpha1.NodeStatus, images []string, value []byte) (pull.Attempt, error) {
	if value == nil {
		return pull.Attempt{}, nil
	}
	var st msg.PullStatus
	if err := msg.Decode(value, &st); err != nil {
		return pull.Attempt{}, fmt.Errorf("pull status of %s/%s on %s: %w", ppi.Namespace, ppi.Name, n.Node, err)
	}
	if st.UID != string(ppi.UID) {
		// An earlier PrePullImage of the same name.
		return pull.Attempt{}, nil
	}
	return pull.FromPullStatus(&st, images, n.Attempts), nil
}

// finalize deletes the PrePullImage's Jobs and pull status, then lets it go.
func (c *controller) finalize(ctx context.Context, ppi *v1alpha1.PrePullImage) error {
	if !slices.Contains(ppi.Finalizers, Finalizer) {
		return nil
	}
	if err := c.deleteJobs(ctx, ppi); err != nil {
		return err
	}
	if err := c.deletePullStatus(ctx, ppi); err != nil {
		return err
	}
	ppi.Finalizers = slices.DeleteFunc(ppi.Finalizers, func(f string) bool { return f == Finalizer })
	if err := c.update(ctx, ppi); err != nil {
		return err
	}
	c.env.Log.InfoContext(ctx, "PrePullImage finalized: its Jobs and pull status are gone", "prepullimage", ppi.Namespace+"/"+ppi.Name)
	return nil
}

// deletePullStatus deletes every node's pull status of ppi.
func (c *controller) deletePullStatus(ctx context.Context, ppi *v1alpha1.PrePullImage) error {
	lister, err := c.pulls.ListKeysFiltered(ctx, msg.PullStatusPrefix(ppi.Namespace, ppi.Name)+"*")
	if err != nil {
		return fmt.Errorf("list the pull status of %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop() // the channel closed: the listing is complete
	for _, k := range keys {
		if err := c.pulls.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete pull status %s: %w", k, err)
		}
	}
	return nil
}

// pullStatusKeys lists the keys of the pull status bucket.
func (c *controller) pullStatusKeys(ctx context.Context) ([]string, error) {
	lister, err := c.pulls.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", msg.BucketPulls, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop() // the channel closed: the listing is complete
	return keys, nil
}

// collectPullStatus deletes the pull status keys of PrePullImages that
// are gone (present: those that exist, by namespace/name): an order
// carried out after its PrePullImage's finalizer ran leaves one.
func (c *controller) collectPullStatus(ctx context.Context, keys []string, present map[string]bool) error {
	var errs []error
	for _, k := range keys {
		ns, name, _, err := msg.ParsePullStatusKey(k)
		if err != nil || present[ns+"/"+name] {
			continue
		}
		e, err := c.pulls.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.pulls.Delete(ctx, k, jetstream.LastRevision(e.Revision())); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			errs = append(errs, fmt.Errorf("delete the pull status %s of a PrePullImage that is gone: %w", k, err))
			continue
		}
		c.env.Log.InfoContext(ctx, "pull status of a PrePullImage that is gone deleted", "key", k)
	}
	return errors.Join(errs...)
}

// onJob looks at the PrePullImage that owns a pull Job.
func (c *controller) onJob(ctx context.Context, namespace, name string) error {
	obj, err := c.objs.get(ctx, c.cfg.Types.Jobs, namespace, name)
	if err != nil || obj == nil {
		return err
	}
	for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
		if ref.Kind == v1alpha1.ImageKind && ref.APIVersion == v1alpha1.GroupVersion.String() {
			return c.reconcileImage(ctx, namespace, ref.Name)
		}
	}
	return nil
}
