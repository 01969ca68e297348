package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
	"github.com/weftio/weft/services/puller/pull"
	"github.com/weftio/weft/services/puller/workload"
)

// retryStart is how soon an attempt that could not start (its slots not
// taken for want of an answer, the order not published) is tried again.
const retryStart = 2 * time.Second

// holdSlots takes the slots of the pull Jobs plan starts; an attempt
// without them is deferred in plan, with the reason as the node's
// message: one that found a limit full is looked at again as soon as a
// slot of that limit is freed (slotWaits), or after SlotPoll.
func (c *controller) holdSlots(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, plan *pull.Plan) {
	for _, s := range slices.Clone(plan.Start) {
		err := c.hold(ctx, ppi.Namespace+"/"+ppi.Name, job.Name(ppi, s.Node, s.Attempt), limits(ppi, spec, s.Node))
		var full *slots.FullError
		switch {
		case err == nil:
		case errors.As(err, &full):
			// Looked at again as soon as a slot of the full limit is
			// freed; SlotPoll later if no free was seen.
			plan.Defer(s.Node, fmt.Sprintf("waiting for a free slot: all %d of %s are held", full.N, full.Scope), c.cfg.Now().Add(c.cfg.SlotPoll))
			c.slotWaits.add(ppi.Namespace, ppi.Name, full)
			c.env.Log.DebugContext(ctx, "pull attempt waits for a slot", "prepullimage", ppi.Namespace+"/"+ppi.Name, "node", s.Node, "scope", full.Scope)
		default:
			plan.Defer(s.Node, "the attempt could not start: "+err.Error(), c.cfg.Now().Add(retryStart))
			c.env.Log.WarnContext(ctx, "pull attempt could not take its slots; will retry", "prepullimage", ppi.Namespace+"/"+ppi.Name, "node", s.Node, "err", err)
		}
	}
}

// start starts the attempts plan says are due, claimed by the status
// written; one that cannot start is deferred in plan (start reports
// whether any was), with the reason as the node's message.
func (c *controller) start(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, plan *pull.Plan) bool {
	deferred := false
	for _, s := range slices.Clone(plan.Start) {
		var err error
		if ppi.Spec.Mode == v1alpha1.ModeJob {
			err = c.startJob(ctx, ppi, spec, s)
		} else {
			err = c.order(ctx, ppi, spec, s)
		}
		log := c.env.Log.With("prepullimage", ppi.Namespace+"/"+ppi.Name, "node", s.Node, "attempt", s.Attempt, "mode", ppi.Spec.Mode)
		if err != nil {
			deferred = true
			plan.Defer(s.Node, "the attempt could not start: "+err.Error(), c.cfg.Now().Add(retryStart))
			log.WarnContext(ctx, "pull attempt could not start; will retry", "err", err)
			continue
		}
		c.metrics.pulls.WithLabelValues(string(ppi.Spec.Mode), "started").Inc()
		log.InfoContext(ctx, "pull attempt started")
	}
	return deferred
}

// order publishes attempt s's pull orders, one per image, to the node's
// agent. The id makes replicas publishing one order together store one.
func (c *controller) order(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, s pull.Start) error {
	var secrets []msg.SecretRef
	for _, ref := range ppi.Spec.ImagePullSecrets {
		secrets = append(secrets, msg.SecretRef{Namespace: ppi.Namespace, Name: ref.Name})
	}
	deadline := c.cfg.Now().Add(spec.Job.Timeout.Duration).UTC()
	for _, image := range workload.UniqueImages(ppi.Spec.Images) {
		o := msg.PullOrder{
			PullTarget: msg.PullTarget{Namespace: ppi.Namespace, Name: ppi.Name, UID: string(ppi.UID),
				Image: image, Node: s.Node, Attempt: int(s.Attempt)},
			Mode: msg.PullModeCRI, PullSecrets: secrets, Deadline: deadline,
			Limits: msg.PullLimits{Cluster: int(spec.Limits.Cluster), PerNode: int(spec.Limits.PerNode), PerRegistry: int(spec.Limits.PerRegistry)},
		}
		if _, err := bus.Publish(ctx, c.env.JS, msg.PullSubject(s.Node), o.ID(), o); err != nil {
			return err
		}
	}
	return nil
}

// limits are the slots a pull Job of ppi on node holds: one in the
// cluster, one on the node, one per registry host of its images.
func limits(ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, node string) []slots.Limit {
	out := []slots.Limit{
		{Scope: msg.ClusterSlotScope, N: int(spec.Limits.Cluster)},
		{Scope: msg.NodeSlotScope(node), N: int(spec.Limits.PerNode)},
	}
	seen := map[string]bool{}
	for _, im := range workload.UniqueImages(ppi.Spec.Images) {
		if h := workload.RegistryHost(im); h != "" && !seen[h] {
			seen[h] = true
			out = append(out, slots.Limit{Scope: msg.RegistrySlotScope(h), N: int(spec.Limits.PerRegistry)})
		}
	}
	return out
}

// startJob creates the attempt's pull Job (its slots are held); on
// failure the slots are freed.
func (c *controller) startJob(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, s pull.Start) error {
	node, err := c.objs.node(ctx, c.cfg.Types.Nodes, s.Node)
	if err != nil {
		return err
	}
	if node == nil {
		return fmt.Errorf("node %s is not in the resources bucket", s.Node)
	}
	name := job.Name(ppi, s.Node, s.Attempt)
	j, err := c.builder.Build(ctx, job.Input{
		Owner: ppi, Node: node, Attempt: s.Attempt, Settings: spec.Job,
		Workload: &corev1.PodSpec{ServiceAccountName: ppi.Spec.ServiceAccountName, ImagePullSecrets: ppi.Spec.ImagePullSecrets},
	})
	if err == nil {
		err = c.createJob(ctx, j)
	}
	if err != nil {
		c.free(ctx, name, nil)
		return err
	}
	return nil
}

// hold takes (or adopts) the slots of the Job name of the PrePullImage
// ppi (namespace/name), owned by the Job's name so any replica can renew
// and free them.
func (c *controller) hold(ctx context.Context, ppi, name string, ls []slots.Limit) error {
	c.mu.Lock()
	cur, ok := c.held[name]
	c.mu.Unlock()
	if ok && cur.h.Err() == nil {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h, err := c.slots.Acquire(actx, name, ls...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if old, ok := c.held[name]; ok {
		old.h.Abandon()
	}
	c.held[name] = heldJob{h: h, ppi: ppi}
	c.mu.Unlock()
	return nil
}

// heldJob is the slots held here for a running pull Job.
type heldJob struct {
	h   *slots.Held
	ppi string // namespace/name
}

// sweep frees the slots held here for Jobs of ppi (namespace/name) that
// are not running by its status (live: the Jobs of its Pulling nodes):
// another replica saw them end.
func (c *controller) sweep(ppi string, live map[string]bool) {
	c.mu.Lock()
	var done []*slots.Held
	for name, hj := range c.held {
		if hj.ppi == ppi && !live[name] {
			done = append(done, hj.h)
			delete(c.held, name)
		}
	}
	c.mu.Unlock()
	for _, h := range done {
		h.Release()
	}
}

// free frees the slots of the Job name: those held here, else (ls given)
// those another replica held, adopted and freed at once.
func (c *controller) free(ctx context.Context, name string, ls []slots.Limit) {
	c.mu.Lock()
	hj, ok := c.held[name]
	delete(c.held, name)
	c.mu.Unlock()
	if ok {
		hj.h.Release()
		return
	}
	if ls == nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if h, err := c.slots.Acquire(actx, name, ls...); err == nil {
		h.Release()
	}
}

// ended counts attempts that ended and frees their Jobs' slots.
func (c *controller) ended(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, ended []pull.Ended) {
	for _, e := range ended {
		phase := v1alpha1.NodePulled
		if e.Failed {
			phase = v1alpha1.NodeFailed
		}
		c.metrics.pulls.WithLabelValues(string(ppi.Spec.Mode), string(phase)).Inc()
		c.metrics.duration.WithLabelValues(string(ppi.Spec.Mode)).Observe(e.Duration.Seconds())
		c.env.Log.InfoContext(ctx, "pull attempt ended", "prepullimage", ppi.Namespace+"/"+ppi.Name, "node", e.Node,
			"attempt", e.Attempt, "failed", e.Failed, "duration", e.Duration)
		if ppi.Spec.Mode == v1alpha1.ModeJob {
			c.free(ctx, job.Name(ppi, e.Node, e.Attempt), limits(ppi, spec, e.Node))
		}
	}
}

// deleteFailedJobs deletes the Job of each node's last attempt when that
// attempt failed (the node waits for its next attempt, or failed for
// good), as the status says.
func (c *controller) deleteFailedJobs(ctx context.Context, ppi *v1alpha1.PrePullImage, nodes []v1alpha1.NodeStatus) error {
	for _, n := range nodes {
		if n.Attempts == 0 || (n.Phase != v1alpha1.NodePending && n.Phase != v1alpha1.NodeFailed) {
			continue
		}
		name := job.Name(ppi, n.Node, n.Attempts)
		obj, err := c.objs.get(ctx, c.cfg.Types.Jobs, ppi.Namespace, name)
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		if err := c.deleteJob(ctx, ppi.Namespace, name); err != nil {
			return err
		}
	}
	return nil
}

// observeJob reads the pull Job of the node's attempt from the bucket,
// and keeps its slots held while it runs.
func (c *controller) observeJob(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, n v1alpha1.NodeStatus) (pull.Attempt, error) {
	name := job.Name(ppi, n.Node, n.Attempts)
	obj, err := c.objs.get(ctx, c.cfg.Types.Jobs, ppi.Namespace, name)
	if err != nil || obj == nil {
		return pull.Attempt{}, err
	}
	var j batchv1.Job
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &j); err != nil {
		return pull.Attempt{}, fmt.Errorf("decode Job %s/%s: %w", ppi.Namespace, name, err)
	}
	for _, cond := range j.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			return pull.Attempt{Done: true}, nil
		case batchv1.JobFailed:
			m := c.podMessage(ctx, ppi.Namespace, name)
			if m == "the pull Job failed" && cond.Message != "" {
				m = joinNonEmpty(cond.Reason, cond.Message)
			}
			return pull.Attempt{Done: true, Failed: true, Message: m}, nil
		}
	}
	if err := c.hold(ctx, ppi.Namespace+"/"+ppi.Name, name, limits(ppi, spec, n.Node)); err != nil {
		var full *slots.FullError
		if !errors.As(err, &full) {
			return pull.Attempt{}, err
		}
		c.env.Log.WarnContext(ctx, "a running pull Job's slot was taken by another", "job", ppi.Namespace+"/"+name, "err", err)
	}
	return pull.Attempt{}, nil
}

// deleteJobs deletes every pull Job of ppi and frees the slots held here.
func (c *controller) deleteJobs(ctx context.Context, ppi *v1alpha1.PrePullImage) error {
	err := c.cfg.Kube.BatchV1().Jobs(ppi.Namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)},
		metav1.ListOptions{LabelSelector: job.LabelImageUID + "=" + string(ppi.UID)})
	if err != nil {
		return fmt.Errorf("delete the pull Jobs of %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	for _, n := range ppi.Status.Nodes {
		if n.Attempts > 0 {
			c.free(ctx, job.Name(ppi, n.Node, n.Attempts), nil)
		}
	}
	return nil
}

// sweepGone frees the slots held here for Jobs of PrePullImages that are
// gone (present: those that exist, by namespace/name).
func (c *controller) sweepGone(present map[string]bool) {
	c.mu.Lock()
	var gone []string
	for _, hj := range c.held {
		if !present[hj.ppi] {
			gone = append(gone, hj.ppi)
		}
	}
	c.mu.Unlock()
	for _, ppi := range gone {
		c.sweep(ppi, nil)
	}
}
