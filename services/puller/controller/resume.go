package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
	"github.com/weftio/weft/services/puller/pull"
)

// resumeGrace is how long after an attempt was claimed its Job may be
// missing from the resources bucket before a look creates it: the
// replica that claims an attempt creates its Job at once, and the watcher
// brings the Job into the bucket well within it.
const resumeGrace = 5 * time.Second

// resumeJobs creates the pull Jobs of the attempts ppi's status claims
// (Pulling) that the resources bucket still lacks resumeGrace after they
// started, except those of started (nodes this look just started): the
// replica that claimed them died before it created them, and without
// their Job they would wait for the attempt's timeout.
func (c *controller) resumeJobs(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, started map[string]bool) error {
	now := c.cfg.Now()
	var errs []error
	for _, n := range ppi.Status.Nodes {
		if n.Phase != v1alpha1.NodePulling || n.Attempts == 0 || started[n.Node] {
			continue
		}
		obj, err := c.objs.get(ctx, c.cfg.Types.Jobs, ppi.Namespace, job.Name(ppi, n.Node, n.Attempts))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if obj != nil {
			continue
		}
		if n.StartTime != nil && now.Before(n.StartTime.Add(resumeGrace)) {
			c.wake.at(ppi.Namespace, ppi.Name, n.StartTime.Add(resumeGrace))
			continue
		}
		errs = append(errs, c.resumeJob(ctx, ppi, spec, n))
	}
	return errors.Join(errs...)
}

// resumeJob creates the Job of node n's claimed attempt, holding its
// slots first. The bucket may be behind the API server, so the attempt is
// resumed only while the API server's status still claims it: a failed
// attempt's Job is deleted only once the status records its end, so a Job
// that ran and was deleted is never made again.
func (c *controller) resumeJob(ctx context.Context, ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, n v1alpha1.NodeStatus) error {
	u, err := c.cfg.Dynamic.Resource(v1alpha1.ImageResource).Namespace(ppi.Namespace).Get(ctx, ppi.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read PrePullImage %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	var cur v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(u.Object, &cur); err != nil {
		return err
	}
	if cur.UID != ppi.UID || cur.DeletionTimestamp != nil || !claims(&cur, n) {
		return nil
	}
	if err := c.keeper.wait(ctx); err != nil {
		return err
	}
	name := job.Name(ppi, n.Node, n.Attempts)
	log := c.env.Log.With("prepullimage", ppi.Namespace+"/"+ppi.Name, "node", n.Node, "attempt", n.Attempts)
	if err := c.hold(ctx, ppi.Namespace+"/"+ppi.Name, name, limits(ppi, spec, n.Node)); err != nil {
		if full := (*slots.FullError)(nil); errors.As(err, &full) {
			log.DebugContext(ctx, "a claimed pull attempt without its Job waits for a slot", "scope", full.Scope)
			c.wake.at(ppi.Namespace, ppi.Name, c.cfg.Now().Add(retryStart))
			return nil
		}
		return err
	}
	if err := c.startJob(ctx, &cur, spec, pull.Start{Node: n.Node, Attempt: n.Attempts}); err != nil {
		return err
	}
	log.InfoContext(ctx, "pull attempt resumed: the Job its status claims did not exist")
	return nil
}

// claims reports whether ppi's status has node n's attempt Pulling.
func claims(ppi *v1alpha1.PrePullImage, n v1alpha1.NodeStatus) bool {
	for _, m := range ppi.Status.Nodes {
		if m.Node == n.Node {
			return m.Phase == v1alpha1.NodePulling && m.Attempts == n.Attempts
		}
	}
	return false
}
