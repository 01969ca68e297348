package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// Errors of View.Decide. Each is a reason to admit the pod unchanged.
var (
	// ErrNotReady: the view has not read the bucket's current objects yet.
	ErrNotReady = errors.New("the view of the resources bucket is not ready")
	// ErrNotWatched: a policy needs objects of a kind the watcher does not
	// write to the bucket (Types names no type for it).
	ErrNotWatched = errors.New("kind not watched")
	// ErrUnknownOwner: the pod's workload (or its namespace) is not in the
	// bucket, nor did it appear before the caller's deadline.
	ErrUnknownOwner = errors.New("owner not in the resources bucket")
)

// Types names the watched types (the <type> part of msg.ResourceKey) under
// which the watcher writes each kind the View reads. An empty name means the
// kind is not watched: pods it would be needed for are admitted unchanged.
// ReplicaSets are needed to resolve Deployments' pods whose ReplicaSet does
// not follow the Deployment's naming (the pod-template-hash label is used
// otherwise); Namespaces only for policies with a namespaceSelector.
type Types struct {
	Policies     string
	Deployments  string
	ReplicaSets  string
	StatefulSets string
	DaemonSets   string
	Namespaces   string
}

// TypesFor fills Types from a lookup of the watched type of an apiVersion
// and kind (config.Config.TypeFor).
func TypesFor(typeFor func(apiVersion, kind string) (string, bool)) Types {
	name := func(apiVersion, kind string) string { n, _ := typeFor(apiVersion, kind); return n }
	return Types{
		Policies:     name(v1alpha1.GroupVersion.String(), v1alpha1.PolicyKind),
		Deployments:  name("apps/v1", "Deployment"),
		ReplicaSets:  name("apps/v1", "ReplicaSet"),
		StatefulSets: name("apps/v1", "StatefulSet"),
		DaemonSets:   name("apps/v1", "DaemonSet"),
		Namespaces:   name("v1", "Namespace"),
	}
}

func (t Types) names() []string {
	var out []string
	for _, n := range []string{t.Policies, t.Deployments, t.ReplicaSets, t.StatefulSets, t.DaemonSets, t.Namespaces} {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func (t Types) workload(kind v1alpha1.WorkloadKind) string {
	switch kind {
	case v1alpha1.KindDeployment:
		return t.Deployments
	case v1alpha1.KindStatefulSet:
		return t.StatefulSets
	case v1alpha1.KindDaemonSet:
		return t.DaemonSets
	}
	return ""
}

// View decides which new pods are gated from the objects the watcher writes
// to the resources bucket. It follows the bucket with a KV watch (Run) and
// keeps, per object, only what a decision needs: labels, UID and
// controller owner, and each policy whole. Decide waits, within its
// context, for a workload that is not in the bucket yet (a Deployment
// created a moment before its pods).
type View struct {
	js    jetstream.JetStream
	types Types
	log   *slog.Logger

	mu      sync.Mutex
	state   *viewState // nil until the first complete read
	changed chan struct{}
}

type viewState struct {
	policies map[string]policyEntry          // by bucket key
	objects  map[objectID]map[string]objMeta // by object, then bucket key
}

type objectID struct{ typ, namespace, name string }

type objMeta struct {
	uid    string
	labels map[string]string
	owner  *metav1.OwnerReference
}

type policyEntry struct {
	name    string
	spec    v1alpha1.PrePullPolicySpec // defaulted
	gated   bool                       // valid and gate: true
	timeout time.Duration
}

// NewView returns a View of the bucket msg.BucketResources reached through
// js, reading the kinds types names. Run must be running for Decide to
// answer.
func NewView(js jetstream.JetStream, types Types, log *slog.Logger) *View {
	return &View{js: js, types: types, log: log, changed: make(chan struct{})}
}

// Run follows the bucket until ctx ends. A watch that ends is started
// again; its first complete read replaces what the view held.
func (v *View) Run(ctx context.Context) error {
	if len(v.types.names()) == 0 || v.types.Policies == "" {
		return fmt.Errorf("gate view: %w: no type of policies", ErrNotWatched)
	}
	delay := 100 * time.Millisecond
	for {
		err := v.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		v.log.Warn("gate view: the watch of the resources bucket ended; watching again", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (v *View) watch(ctx context.Context) error {
	filters := make([]string, 0, 6)
	for _, n := range v.types.names() {
		filters = append(filters, "*."+n+".>")
	}
	var kv jetstream.KeyValue
	err := msg.Open(ctx, "open the resources bucket for the gate", func(ctx context.Context) (err error) {
		kv, err = v.js.KeyValue(ctx, msg.BucketResources)
		return err
	})
	if err != nil {
		return err
	}
	// The watch lives as long as ctx: a context of one try of msg.Open
	// would end it as soon as the try returns.
	w, err := msg.Watch(ctx, kv, filters)
	if err != nil {
		return fmt.Errorf("watch the resources bucket: %w", err)
	}
	defer msg.StopWatch(w)
	next := &viewState{policies: map[string]policyEntry{}, objects: map[objectID]map[string]objMeta{}}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch closed")
			}
			if e == nil {
				if initial {
					v.mu.Lock()
					v.state = next
					v.notify()
					v.mu.Unlock()
					initial = false
				}
				continue
			}
			if initial {
				v.apply(next, e)
				continue
			}
			v.mu.Lock()
			v.apply(v.state, e)
			v.notify()
			v.mu.Unlock()
		}
	}
}

// Ready reports whether the view has read the bucket's current objects:
// until it has, Decide answers ErrNotReady.
func (v *View) Ready() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state != nil
}

// notify wakes every Decide waiting for a change; v.mu is held.
func (v *View) notify() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// apply records one bucket entry in s.
func (v *View) apply(s *viewState, e jetstream.KeyValueEntry) {
	_, typ, ns, name, err := msg.ParseResourceKey(e.Key())
	if err != nil {
		return
	}
	key := e.Key()
	id := objectID{typ, ns, name}
	del := e.Operation() != jetstream.KeyValuePut
	var res msg.Resource
	if !del {
		if err := msg.Decode(e.Value(), &res); err != nil {
			v.log.Warn("gate view: an object in the resources bucket does not decode; taken as absent", "key", key, "err", err)
			del = true
		}
	}
	if typ == v.types.Policies {
		delete(s.policies, key)
		if !del {
			if p, ok := v.policy(key, res.Object); ok {
				s.policies[key] = p
			}
		}
	}
	if typ != v.types.Policies {
		byKey := s.objects[id]
		delete(byKey, key)
		if !del {
			if byKey == nil {
				byKey = map[string]objMeta{}
				s.objects[id] = byKey
			}
			byKey[key] = metaOf(res.Object)
		}
		if len(byKey) == 0 {
			delete(s.objects, id)
		}
	}
}

func (v *View) policy(key string, obj map[string]any) (policyEntry, bool) {
	var p v1alpha1.PrePullPolicy
	if err := v1alpha1.FromUnstructured(obj, &p); err != nil {
		v.log.Warn("gate view: a policy in the resources bucket does not decode; it gates nothing", "key", key, "err", err)
		return policyEntry{}, false
	}
	spec := p.Spec
	spec.Default()
	valid := len(v1alpha1.ValidatePolicy(&spec)) == 0
	return policyEntry{name: p.Name, spec: spec, gated: valid && spec.Gate, timeout: spec.GateTimeout.Duration}, true
}

func metaOf(obj map[string]any) objMeta {
	u := unstructured.Unstructured{Object: obj}
	m := objMeta{uid: string(u.GetUID()), labels: u.GetLabels()}
	m.owner = metav1.GetControllerOfNoCopy(&u)
	return m
}

// Decide answers whether pod (a Pod being created) is gated, and by which
// policy. It waits until ctx ends for a workload or namespace a gated
// policy could select that is not in the bucket yet; any error means the
// view cannot tell.
func (v *View) Decide(ctx context.Context, pod *corev1.Pod) (Decision, error) {
	for {
		v.mu.Lock()
		s, changed := v.state, v.changed
		var (
			d     Decision
			retry bool
			err   error
		)
		if s == nil {
			err = ErrNotReady
		} else {
			d, retry, err = v.decide(s, pod)
		}
		v.mu.Unlock()
		if err != nil || !retry {
			return d, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Decision{}, fmt.Errorf("%w: %w", ErrUnknownOwner, ctx.Err())
		}
	}
}

// decide decides on the state s; retry asks to decide again once s changed
// (an object needed is missing).
func (v *View) decide(s *viewState, pod *corev1.Pod) (Decision, bool, error) {
	if pod.Spec.NodeName != "" { // the scheduler is bypassed; the API server refuses gates on it
		return Decision{}, false, nil
	}
	var candidates []policyEntry
	for _, p := range s.policies {
		if p.gated && (len(p.spec.Workloads.Namespaces) == 0 || slices.Contains(p.spec.Workloads.Namespaces, pod.Namespace)) {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		return Decision{}, false, nil
	}
	w, retry, err := v.workload(s, pod)
	if retry && !slices.ContainsFunc(candidates, func(p policyEntry) bool {
		return slices.Contains(p.spec.Workloads.Kinds, v1alpha1.KindDeployment)
	}) {
		return Decision{}, false, nil // the ReplicaSet's Deployment could not be gated anyway
	}
	if err != nil || retry || w.Kind == "" {
		return Decision{}, retry, err
	}
	candidates = slices.DeleteFunc(candidates, func(p policyEntry) bool { return !slices.Contains(p.spec.Workloads.Kinds, w.Kind) })
	if len(candidates) == 0 {
		return Decision{}, false, nil
	}
	typ := v.types.workload(w.Kind)
	if typ == "" {
		return Decision{}, false, fmt.Errorf("%w: %s (pod owned by %s %s)", ErrNotWatched, w.Kind, w.Kind, w.Name)
	}
	m, ok := s.object(typ, pod.Namespace, w.Name)
	if !ok || (w.UID != "" && m.uid != w.UID) {
		return Decision{}, true, nil
	}
	w.UID = m.uid
	slices.SortFunc(candidates, func(a, b policyEntry) int { return strings.Compare(a.name, b.name) })
	for _, p := range candidates {
		match, retry, err := v.selects(s, p, pod.Namespace, m.labels)
		if err != nil || retry {
			return Decision{}, retry, err
		}
		if match {
			return Decision{Gated: true, Policy: p.name, Timeout: Duration(p.timeout), Workload: w}, false, nil
		}
	}
	return Decision{}, false, nil
}

// workload resolves the pod's controlling workload. An empty Kind means
// the pod belongs to no workload a policy selects.
func (v *View) workload(s *viewState, pod *corev1.Pod) (v1alpha1.WorkloadReference, bool, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || !isApps(ref.APIVersion) {
		return v1alpha1.WorkloadReference{}, false, nil
	}
	switch ref.Kind {
	case string(v1alpha1.KindStatefulSet), string(v1alpha1.KindDaemonSet):
		return v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.WorkloadKind(ref.Kind), Name: ref.Name, UID: string(ref.UID)}, false, nil
	case "ReplicaSet":
	default:
		return v1alpha1.WorkloadReference{}, false, nil
	}
	if v.types.ReplicaSets != "" {
		if rs, ok := s.object(v.types.ReplicaSets, pod.Namespace, ref.Name); ok && (ref.UID == "" || string(ref.UID) == rs.uid) {
			if rs.owner == nil || !isApps(rs.owner.APIVersion) || rs.owner.Kind != string(v1alpha1.KindDeployment) {
				return v1alpha1.WorkloadReference{}, false, nil
			}
			return v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: rs.owner.Name, UID: string(rs.owner.UID)}, false, nil
		}
	}
	// The Deployment controller names a ReplicaSet <deployment>-<hash> and
	// labels its pods pod-template-hash=<hash>: enough while the ReplicaSet
	// itself is not in the bucket yet (it was made a moment ago).
	hash := pod.Labels["pod-template-hash"]
	if name, ok := strings.CutSuffix(ref.Name, "-"+hash); ok && hash != "" && name != "" {
		return v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: name}, false, nil
	}
	if v.types.ReplicaSets == "" {
		return v1alpha1.WorkloadReference{}, false, fmt.Errorf("%w: ReplicaSet (pod owned by ReplicaSet %s)", ErrNotWatched, ref.Name)
	}
	return v1alpha1.WorkloadReference{}, true, nil
}

func isApps(apiVersion string) bool { return apiVersion == "apps/v1" }

// selects reports whether policy p selects a workload with labels in
// namespace.
func (v *View) selects(s *viewState, p policyEntry, namespace string, lbls map[string]string) (bool, bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(p.spec.Workloads.Selector)
	if err != nil || !sel.Matches(labels.Set(lbls)) {
		return false, false, nil
	}
	if p.spec.Workloads.NamespaceSelector == nil {
		return true, false, nil
	}
	nsSel, err := metav1.LabelSelectorAsSelector(p.spec.Workloads.NamespaceSelector)
	if err != nil {
		return false, false, nil
	}
	if v.types.Namespaces == "" {
		return false, false, fmt.Errorf("%w: Namespace (policy %s has a namespaceSelector)", ErrNotWatched, p.name)
	}
	ns, ok := s.object(v.types.Namespaces, "", namespace)
	if !ok {
		return false, true, nil
	}
	return nsSel.Matches(labels.Set(ns.labels)), false, nil
}

// object returns the object of type typ named namespace/name; of several
// sources holding it, the one with the first key.
func (s *viewState) object(typ, namespace, name string) (objMeta, bool) {
	byKey := s.objects[objectID{typ, namespace, name}]
	if len(byKey) == 0 {
		return objMeta{}, false
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return byKey[keys[0]], true
}
