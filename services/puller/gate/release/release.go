// Package release removes the puller's scheduling gate (gate.Name) from
// gated pods: once the pod's images are warm (a PrePullImage of its
// workload listing every image of the pod is Completed), once that
// PrePullImage Failed, once the policy that gated the pod no longer gates,
// or once the pod is older than the policy's gateTimeout; so a gate never
// holds a rollout forever (Judge decides). Only the gate.Name gate and the
// gate.Label label are removed, other gates are left as they are.
//
// Releaser.Pass looks at every gated pod once (the controller calls it on
// changes; Run calls it on an interval and at the next timeout). A gate
// removed is an Event on the workload ("images warm; gate removed from pod
// ...", "gate timed out after ...") and the Gated condition of the
// PrePullImage (True, ImagesPulling, while pods wait; False with the
// reason once none does). Replicas may run Pass at once: the pod patch
// tests the gates it read, so only one removal applies, and only the
// replica whose patch applied records the Event. Metrics are
// weft_puller_gate_removed_total{reason}, weft_puller_gate_pods_waiting and
// weft_puller_gate_release_errors_total.
package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

// State is what a pass reads: the gated pods, the policies and the
// PrePullImages (APIState reads them from the API server).
type State interface {
	// GatedPods lists the pods labelled gate.Label. With an error, the
	// pods it could read are still looked at.
	GatedPods(ctx context.Context) ([]corev1.Pod, error)
	// Policy returns the policy named name, or nil when there is none.
	Policy(ctx context.Context, name string) (*v1alpha1.PrePullPolicy, error)
	// Images lists the PrePullImages of namespace (with an error, those
	// it could read).
	Images(ctx context.Context, namespace string) ([]v1alpha1.PrePullImage, error)
}

// Releaser removes gates. Its writes go to the API server.
type Releaser struct {
	state  State
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	events record.EventRecorder
	log    *slog.Logger
	m      *metrics
	// Now is the clock (time.Now).
	Now func() time.Time
}

// New returns a Releaser reading state and writing through cs (pods) and
// dyn (PrePullImages' status); Events go to events (NewRecorder).
func New(state State, cs kubernetes.Interface, dyn dynamic.Interface, events record.EventRecorder, log *slog.Logger, reg prometheus.Registerer) (*Releaser, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Releaser{state: state, cs: cs, dyn: dyn, events: events, log: log, m: m, Now: time.Now}, nil
}

// Pass looks at every gated pod once, removes the gates whose time has
// come and updates the PrePullImages' Gated condition. It returns the time
// until the next gate times out (0: no pod waits). Errors of single pods
// are joined; the others are still looked at.
func (r *Releaser) Pass(ctx context.Context) (time.Duration, error) {
	var errs []error
	pods, err := r.state.GatedPods(ctx)
	if err != nil {
		// Pods that were read are still looked at: one bad object must
		// not hold every gate.
		r.m.errors.Inc()
		errs = append(errs, fmt.Errorf("gate release: list gated pods: %w", err))
	}
	var (
		next    time.Duration
		waiting int
		images  = map[string][]v1alpha1.PrePullImage{} // by namespace
		conds   = map[types.NamespacedName]metav1.Condition{}
	)
	for i := range pods {
		pod := &pods[i]
		imgs, ok := images[pod.Namespace]
		if !ok {
			if imgs, err = r.state.Images(ctx, pod.Namespace); err != nil {
				// Those read still count; the timeout applies anyway.
				r.m.errors.Inc()
				errs = append(errs, fmt.Errorf("gate release: PrePullImages of %s: %w", pod.Namespace, err))
			}
			images[pod.Namespace] = imgs
		}
		v, err := r.releasePod(ctx, pod, imgs)
		if err != nil {
			r.m.errors.Inc()
			errs = append(errs, err)
		}
		if v.Release && err != nil || !v.Release && v.Wait > 0 {
			waiting++
			if v.Wait > 0 && (next == 0 || v.Wait < next) {
				next = v.Wait
			}
		}
		if v.Image != nil {
			id := types.NamespacedName{Namespace: v.Image.Namespace, Name: v.Image.Name}
			if c, seen := conds[id]; !seen || c.Status != metav1.ConditionTrue {
				conds[id] = gatedCondition(v, err == nil)
			}
		}
	}
	r.m.waiting.Set(float64(waiting))
	for id, c := range conds {
		if err := r.setCondition(ctx, id, c); err != nil {
			r.m.errors.Inc()
			errs = append(errs, err)
		}
	}
	return next, errors.Join(errs...)
}

// gatedCondition is the Gated condition for one pod's verdict: True while
// it waits (or its release failed), False with the release's reason. Its
// message names no pod, so replicas and passes agree on it.
func gatedCondition(v Verdict, released bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionGated, Status: metav1.ConditionFalse, Reason: v.Reason, Message: conditionMessages[v.Reason]}
	if !v.Release || !released {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonWaiting, conditionMessages[ReasonWaiting]
	}
	return c
}

var conditionMessages = map[string]string{
	ReasonWaiting:    "pods of the workload are gated until these images are warm",
	ReasonImagesWarm: "images warm; the gates of the workload's pods were removed",
	ReasonTimeout:    "gates timed out before the images were warm, and were removed",
	ReasonPullFailed: "images failed to pull; the gates were removed",
	ReasonGateOff:    "the policy no longer gates; the gates were removed",
}

// releasePod judges one pod and removes its gate when its time has come.
func (r *Releaser) releasePod(ctx context.Context, pod *corev1.Pod, images []v1alpha1.PrePullImage) (Verdict, error) {
	if !gate.Has(pod) { // the gate went (someone removed it): only the label is left to remove
		return Verdict{}, r.patch(ctx, pod)
	}
	d, derr := gate.Parse(pod)
	if derr != nil {
		r.log.Warn("gate release: a gated pod without a readable decision; its gate is held at most the default timeout",
			"namespace", pod.Namespace, "pod", pod.Name, "err", derr)
	}
	policy, timeout := PolicyUnknown, time.Duration(0)
	if d.Gated {
		p, err := r.state.Policy(ctx, d.Policy)
		switch {
		case err != nil:
			r.log.Warn("gate release: the policy that gated a pod is unreadable; its recorded timeout applies", "policy", d.Policy, "err", err)
		case p == nil:
			policy = PolicyOff
		default:
			spec := p.Spec
			spec.Default()
			policy = PolicyOff
			if spec.Gate && len(v1alpha1.ValidatePolicy(&spec)) == 0 {
				policy, timeout = PolicyGating, spec.GateTimeout.Duration
			}
		}
	}
	v := Judge(pod, d, policy, timeout, images, r.Now())
	if !v.Release {
		return v, nil
	}
	if err := r.patch(ctx, pod); err != nil {
		if errors.Is(err, errGone) {
			return Verdict{}, nil // another replica removed it, or the pod went
		}
		return v, err
	}
	r.m.removed.WithLabelValues(v.Reason).Inc()
	r.log.Info("gate release: gate removed", "namespace", pod.Namespace, "pod", pod.Name, "reason", v.Reason, "message", v.Message)
	kind := corev1.EventTypeNormal
	if v.Reason != ReasonImagesWarm {
		kind = corev1.EventTypeWarning
	}
	r.events.Event(eventObject(pod, d), kind, v.Reason, v.Message)
	return v, nil
}

// errGone: the pod no longer has the gate (or is gone); nothing to do.
var errGone = errors.New("gate already removed")

// patch removes the gate and label from pod, testing that its gates are
// still those read.
func (r *Releaser) patch(ctx context.Context, pod *corev1.Pod) error {
	ops := gate.RemovePatch(pod)
	if len(ops) == 0 {
		return nil
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("gate release: %w", err)
	}
	pods := r.cs.CoreV1().Pods(pod.Namespace)
	_, err = pods.Patch(ctx, pod.Name, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: "weft-puller"})
	if err == nil {
		return nil
	}
	// Another replica's patch may have applied first: read the pod again.
	now, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return errGone
	case gerr == nil && now.UID != pod.UID:
		return errGone
	case gerr == nil && !gate.Has(now) && gate.Has(pod):
		return errGone
	}
	return fmt.Errorf("gate release: remove the gate of pod %s/%s: %w", pod.Namespace, pod.Name, err)
}

// eventObject is what the Event is about: the workload, or the pod when
// its workload is unknown.
func eventObject(pod *corev1.Pod, d gate.Decision) runtime.Object {
	if !d.Gated {
		return pod
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: d.Workload.APIVersion, Kind: string(d.Workload.Kind)},
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: d.Workload.Name, UID: types.UID(d.Workload.UID)},
	}
}

// setCondition sets c on the PrePullImage id's status, reading it again on
// a conflict; nothing is written when the condition holds already.
func (r *Releaser) setCondition(ctx context.Context, id types.NamespacedName, c metav1.Condition) error {
	res := r.dyn.Resource(v1alpha1.ImageResource).Namespace(id.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		u, err := res.Get(ctx, id.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var p v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(u.Object, &p); err != nil {
			return err
		}
		c.ObservedGeneration = p.Generation
		if !meta.SetStatusCondition(&p.Status.Conditions, c) {
			return nil
		}
		obj, err := v1alpha1.ToUnstructured(&p)
		if err != nil {
			return err
		}
		_, err = res.UpdateStatus(ctx, &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{FieldManager: "weft-puller"})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate release: condition %s of PrePullImage %s: %w", ConditionGated, id, err)
	}
	return nil
}

// Run calls Pass every interval, and when the next gate times out, until
// ctx ends. A failed pass is logged and tried again at the next interval.
func (r *Releaser) Run(ctx context.Context, interval time.Duration) error {
	for {
		next, err := r.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("gate release: pass failed; trying again", "err", err, "retry_in", interval)
		}
		wait := interval
		if next > 0 && next < wait {
			wait = next
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

type metrics struct {
	removed *prometheus.CounterVec
	waiting prometheus.Gauge
	errors  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_gate_removed_total",
			Help: "Scheduling gates removed, by reason (ImagesWarm, GateTimeout, PullFailed, GateOff).",
		}, []string{"reason"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_puller_gate_pods_waiting",
			Help: "Gated pods still waiting for their images at the last pass.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_puller_gate_release_errors_total",
			Help: "Reads and writes of the gate release that failed (tried again at the next pass).",
		}),
	}
	for _, r := range []string{ReasonImagesWarm, ReasonTimeout, ReasonPullFailed, ReasonGateOff} {
		m.removed.WithLabelValues(r)
	}
	if err := svc.Register(reg, "puller gate release", m.removed, m.waiting, m.errors); err != nil {
		return nil, err
	}
	return m, nil
}
