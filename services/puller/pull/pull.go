// Package pull is the puller's per-node state machine of a PrePullImage:
// from the PrePullImage's status, the policy, what was observed of each
// node's current attempt and the time, Step computes the next status and
// the attempts to start. It does nothing itself; the controller carries
// out what it says and writes the status.
//
// A node is Pending until its first attempt starts, Pulling while an
// attempt runs, and Pulled or Failed for good. A failed attempt is tried
// again after the policy's backoff, doubling per attempt up to maxBackoff,
// until maxAttempts attempts failed; the node then fails with the last
// attempt's message. The PrePullImage is Pending until an attempt started,
// InProgress while any node is not finished, Completed when every node
// pulled, Failed when every node finished and one failed; Completed ones
// are due for deletion TTL after their completion.
package pull

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// Attempt is what was observed of one node's current attempt.
type Attempt struct {
	// Done: the attempt ended; Failed says how, Message why.
	Done    bool
	Failed  bool
	Message string
}

// FromPullStatus is the outcome of attempt n of images on a node, as the
// node agent recorded it (mode cri): done once every image's order of
// attempt n was carried out, failed when any of them failed.
func FromPullStatus(st *msg.PullStatus, images []string, n int32) Attempt {
	if st == nil {
		return Attempt{}
	}
	var msgs []string
	for _, im := range images {
		p, ok := st.Image(im)
		if !ok || int32(p.Attempts) != n {
			return Attempt{}
		}
		switch p.Phase {
		case msg.PullPulled:
		case msg.PullFailed:
			msgs = append(msgs, im+": "+p.Message)
		default:
			return Attempt{}
		}
	}
	return Attempt{Done: true, Failed: len(msgs) > 0, Message: strings.Join(msgs, "; ")}
}

// Plan is what Step decided.
type Plan struct {
	// Status is the next status; the nodes of Start are in it as Pulling
	// with their new attempt, as they will be once started.
	Status v1alpha1.PrePullImageStatus
	// Start lists the nodes whose next attempt is due, with its number.
	Start []Start
	// Ended lists the nodes whose attempt ended in this step.
	Ended []Ended
	// Wake is when a step is next due without any change (a backoff or the
	// TTL ends); zero for never.
	Wake time.Time
	// Expired: Completed, and its TTL is over: delete the PrePullImage.
	Expired bool

	ppi  *v1alpha1.PrePullImage
	spec *v1alpha1.PrePullPolicySpec
	now  time.Time
}

// Start is one node's attempt to start.
type Start struct {
	Node    string
	Attempt int32
}

// Ended is one node's attempt that ended.
type Ended struct {
	Node     string
	Attempt  int32
	Failed   bool
	Duration time.Duration
}

// Step computes the next status of ppi under the defaulted policy spec,
// given what was observed of each Pulling node's current attempt.
func Step(ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, observed map[string]Attempt, now time.Time) Plan {
	p := Plan{ppi: ppi, spec: spec, now: now}
	old := map[string]v1alpha1.NodeStatus{}
	for _, n := range ppi.Status.Nodes {
		old[n.Node] = n
	}
	t := metav1.NewTime(now)
	for _, node := range ppi.Spec.Nodes {
		ns, ok := old[node]
		if !ok {
			ns = v1alpha1.NodeStatus{Node: node, Phase: v1alpha1.NodePending}
		}
		ns = p.stepNode(ns, spec, observed[node], t)
		p.Status.Nodes = append(p.Status.Nodes, ns)
	}
	p.summarize(ppi, spec, t)
	return p
}

// Grace is how long past the policy's job timeout an attempt may go
// without an outcome before it counts as failed (an agent that is not
// running, a Job nobody observes).
const Grace = 30 * time.Second

func (p *Plan) stepNode(ns v1alpha1.NodeStatus, spec *v1alpha1.PrePullPolicySpec, obs Attempt, now metav1.Time) v1alpha1.NodeStatus {
	if ns.Phase == v1alpha1.NodePulling && !obs.Done && ns.StartTime != nil && spec.Job.Timeout != nil {
		due := ns.StartTime.Add(spec.Job.Timeout.Duration + Grace)
		if due.After(now.Time) {
			p.wake(due)
		} else {
			obs = Attempt{Done: true, Failed: true, Message: "no outcome within " + (spec.Job.Timeout.Duration + Grace).String()}
		}
	}
	if ns.Phase == v1alpha1.NodePulling && obs.Done {
		ended := Ended{Node: ns.Node, Attempt: ns.Attempts, Failed: obs.Failed}
		if ns.StartTime != nil {
			ended.Duration = now.Sub(ns.StartTime.Time)
		}
		p.Ended = append(p.Ended, ended)
		ns.Message = obs.Message
		switch {
		case !obs.Failed:
			ns.Phase, ns.CompletionTime = v1alpha1.NodePulled, &now
		case ns.Attempts >= spec.Retry.MaxAttempts:
			ns.Phase, ns.CompletionTime = v1alpha1.NodeFailed, &now
		default:
			next := metav1.NewTime(now.Add(Backoff(spec.Retry, ns.Attempts)))
			ns.Phase, ns.NextAttemptTime = v1alpha1.NodePending, &next
		}
	}
	if ns.Phase != v1alpha1.NodePending {
		return ns
	}
	if ns.NextAttemptTime != nil && ns.NextAttemptTime.After(now.Time) {
		p.wake(ns.NextAttemptTime.Time)
		return ns
	}
	ns.Attempts++
	p.Start = append(p.Start, Start{Node: ns.Node, Attempt: ns.Attempts})
	// What the node waited for, or why its last attempt failed, is no
	// longer its state: the attempt's outcome will say.
	ns.Phase, ns.NextAttemptTime, ns.StartTime, ns.Message = v1alpha1.NodePulling, nil, &now, ""
	return ns
}

// Defer takes back the start of node's attempt (it could not start: no
// free slot, the order not published): the node stays Pending with
// message, and is tried again at retry.
func (p *Plan) Defer(node, message string, retry time.Time) {
	p.Start = slices.DeleteFunc(p.Start, func(s Start) bool { return s.Node == node })
	old := map[string]v1alpha1.NodeStatus{}
	for _, n := range p.ppi.Status.Nodes {
		old[n.Node] = n
	}
	for i, n := range p.Status.Nodes {
		if n.Node != node {
			continue
		}
		prev, ok := old[node]
		if !ok {
			prev = v1alpha1.NodeStatus{Node: node, Phase: v1alpha1.NodePending}
		}
		prev.Phase, prev.Message = v1alpha1.NodePending, message
		p.Status.Nodes[i] = prev
	}
	p.wake(retry)
	p.Status.NodesPulled, p.Status.NodesFailed = 0, 0
	p.summarize(p.ppi, p.spec, metav1.NewTime(p.now))
}

// Backoff is the wait after the n-th failed attempt: backoff*2^(n-1), at
// most maxBackoff.
func Backoff(r v1alpha1.Retry, n int32) time.Duration {
	d, limit := r.Backoff.Duration, r.MaxBackoff.Duration
	for i := int32(1); i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (p *Plan) wake(t time.Time) {
	if p.Wake.IsZero() || t.Before(p.Wake) {
		p.Wake = t
	}
}

// summarize sets the overall phase, counts, times and the Warm condition.
func (p *Plan) summarize(ppi *v1alpha1.PrePullImage, spec *v1alpha1.PrePullPolicySpec, now metav1.Time) {
	s := &p.Status
	s.ObservedGeneration = ppi.Generation
	s.StartTime, s.CompletionTime = ppi.Status.StartTime, ppi.Status.CompletionTime
	s.Conditions = slices.Clone(ppi.Status.Conditions)
	s.NodesTotal = int32(len(s.Nodes))
	started := false
	for _, n := range s.Nodes {
		switch n.Phase {
		case v1alpha1.NodePulled:
			s.NodesPulled++
		case v1alpha1.NodeFailed:
			s.NodesFailed++
		}
		started = started || n.Attempts > 0
	}
	finished := s.NodesPulled+s.NodesFailed == s.NodesTotal && s.NodesTotal > 0
	switch {
	case finished && s.NodesFailed == 0:
		s.Phase = v1alpha1.ImageCompleted
	case finished:
		s.Phase = v1alpha1.ImageFailed
	case started:
		s.Phase = v1alpha1.ImageInProgress
	default:
		s.Phase = v1alpha1.ImagePending
	}
	if started && s.StartTime == nil {
		s.StartTime = &now
	}
	if !finished {
		s.CompletionTime = nil
	} else if s.CompletionTime == nil || ppi.Status.Phase != s.Phase {
		s.CompletionTime = &now
	}
	meta.SetStatusCondition(&s.Conditions, warm(s, ppi.Generation))
	if s.Phase == v1alpha1.ImageCompleted && spec.TTL != nil {
		due := s.CompletionTime.Add(spec.TTL.Duration)
		if !due.After(now.Time) {
			p.Expired = true
		} else {
			p.wake(due)
		}
	}
}

func warm(s *v1alpha1.PrePullImageStatus, generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionWarm, ObservedGeneration: generation, Status: metav1.ConditionFalse}
	switch s.Phase {
	case v1alpha1.ImageCompleted:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "Pulled", "the images are on every target node"
	case v1alpha1.ImageFailed:
		c.Reason = "PullFailed"
		var failed []string
		for _, n := range s.Nodes {
			if n.Phase == v1alpha1.NodeFailed {
				failed = append(failed, n.Node+": "+n.Message)
			}
		}
		c.Message = strings.Join(failed, "; ")
	default:
		c.Reason, c.Message = "Pulling", "the images are being pulled"
	}
	return c
}
