package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
	"github.com/weftio/weft/services/puller/workload"
)

// policy is a valid policy, its spec defaulted.
type policy struct {
	name string
	spec v1alpha1.PrePullPolicySpec
}

// validPolicies reads every policy and keeps the valid ones, by name.
func (c *controller) validPolicies(ctx context.Context) ([]policy, error) {
	objs, err := c.objs.list(ctx, c.cfg.Types.Policies)
	if err != nil {
		return nil, err
	}
	var out []policy
	for _, obj := range objs {
		var p v1alpha1.PrePullPolicy
		if err := v1alpha1.FromUnstructured(obj, &p); err != nil {
			c.env.Log.WarnContext(ctx, "a policy that does not decode is ignored", "err", err)
			continue
		}
		spec := p.Spec
		spec.Default()
		if len(v1alpha1.ValidatePolicy(&spec)) == 0 {
			out = append(out, policy{name: p.Name, spec: spec})
		}
	}
	slices.SortFunc(out, func(a, b policy) int { return compare(a.name, b.name) })
	return out, nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// policyFor is the first valid policy by name that selects w, or nil.
func (c *controller) policyFor(ctx context.Context, v *view, w *workload.Workload) (*policy, error) {
	nsLabels, ok := v.nsLabels[w.Namespace]
	if !ok {
		var err error
		if nsLabels, err = c.namespaceLabels(ctx, w.Namespace); err != nil {
			return nil, err
		}
		v.nsLabels[w.Namespace] = nsLabels
	}
	for i := range v.policies {
		ok, err := workload.Selects(&v.policies[i].spec, w, nsLabels)
		if err != nil {
			return nil, err
		}
		if ok {
			return &v.policies[i], nil
		}
	}
	return nil, nil
}

// namespaceLabels are the labels of the namespace as the bucket has it
// (nil when it has not).
func (c *controller) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	obj, err := c.objs.get(ctx, c.cfg.Types.Namespaces, "", name)
	if err != nil || obj == nil {
		return nil, err
	}
	labels := (&unstructured.Unstructured{Object: obj}).GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	return labels, nil
}

// view is what looks at workloads read once: the valid policies, the
// Nodes, the PrePullImages and namespaces' labels.
type view struct {
	policies []policy
	nodes    []corev1.Node
	images   []v1alpha1.PrePullImage
	nsLabels map[string]map[string]string
}

func (c *controller) readView(ctx context.Context) (*view, error) {
	v := &view{nsLabels: map[string]map[string]string{}}
	var err error
	if v.policies, err = c.validPolicies(ctx); err != nil {
		return nil, err
	}
	if v.nodes, err = c.objs.nodes(ctx, c.cfg.Types.Nodes); err != nil {
		return nil, err
	}
	objs, err := c.objs.list(ctx, c.cfg.Types.Images)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		var ppi v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(obj, &ppi); err == nil {
			v.images = append(v.images, ppi)
		}
	}
	return v, nil
}

// reconcileWorkloads looks at every workload (a policy, node or namespace
// changed).
func (c *controller) reconcileWorkloads(ctx context.Context) error {
	v, err := c.readView(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, typ := range c.cfg.Types.workloads() {
		objs, err := c.objs.list(ctx, typ)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, obj := range objs {
			errs = append(errs, c.workloadStep(ctx, v, typ, obj))
		}
	}
	return errors.Join(errs...)
}

// reconcileWorkload makes or extends the PrePullImage of one workload.
func (c *controller) reconcileWorkload(ctx context.Context, typ, namespace, name string) error {
	obj, err := c.objs.get(ctx, typ, namespace, name)
	if err != nil || obj == nil {
		return err
	}
	v, err := c.readView(ctx)
	if err != nil {
		return err
	}
	return c.workloadStep(ctx, v, typ, obj)
}

// workloadStep makes or extends the PrePullImage of the workload obj.
func (c *controller) workloadStep(ctx context.Context, v *view, typ string, obj map[string]any) error {
	w, err := workload.Decode(obj)
	if err != nil {
		u := unstructured.Unstructured{Object: obj}
		c.env.Log.WarnContext(ctx, "a workload that does not decode is ignored", "type", typ, "workload", u.GetNamespace()+"/"+u.GetName(), "err", err)
		return nil
	}
	images := w.Images()
	if w.Deleting || len(images) == 0 {
		return nil
	}
	id := w.Namespace + "/" + w.Name
	p, err := c.policyFor(ctx, v, w)
	if err != nil || p == nil {
		c.env.Log.DebugContext(ctx, "no valid policy selects the workload", "workload", id, "policies", len(v.policies), "err", err)
		return err
	}
	lacking, err := workload.Lacking(w, v.nodes, p.spec.NodeSelector)
	if err != nil {
		c.env.Log.WarnContext(ctx, "no node can be chosen for a workload", "workload", id, "err", err)
		return nil
	}
	c.env.Log.DebugContext(ctx, "workload selected", "workload", id, "policy", p.name, "nodes", len(v.nodes), "lacking", lacking)
	ppiName := workload.Name(w, workload.ImageSetHash(images))
	cur, err := c.objs.get(ctx, c.cfg.Types.Images, w.Namespace, ppiName)
	switch {
	case err != nil:
	case cur != nil:
		err = c.addNodes(ctx, cur, lacking)
	case len(lacking) > 0:
		err = c.createImage(ctx, w, p, ppiName, images, lacking)
	}
	// The superseded PrePullImages go after the current one is made (and
	// when it could not be), so that its change comes first and its pulls
	// do not wait behind their finalizers.
	return errors.Join(err, c.deleteSuperseded(ctx, v, w, ppiName))
}

// deleteSuperseded deletes the PrePullImages of w other than current: the
// workload no longer uses their images.
func (c *controller) deleteSuperseded(ctx context.Context, v *view, w *workload.Workload, current string) error {
	for i := range v.images {
		ppi := &v.images[i]
		if ppi.Namespace != w.Namespace || ppi.Name == current || ppi.Spec.Workload.UID != string(w.UID) || ppi.DeletionTimestamp != nil {
			continue
		}
		c.env.Log.InfoContext(ctx, "PrePullImage superseded by the workload's new images; deleting it", "prepullimage", ppi.Namespace+"/"+ppi.Name, "by", current)
		if err := c.deleteImage(ctx, ppi); err != nil {
			return err
		}
	}
	return nil
}

// createImage creates the PrePullImage of w; one that exists is done.
func (c *controller) createImage(ctx context.Context, w *workload.Workload, p *policy, name string, images []v1alpha1.ContainerImage, nodes []string) error {
	secrets, err := job.PullSecrets(ctx, kubeServiceAccounts{c.cfg.Kube}, w.Namespace, &w.Template)
	if err != nil {
		return err
	}
	ppi := &v1alpha1.PrePullImage{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: w.Namespace,
			Labels:     map[string]string{job.LabelManagedBy: job.ManagedBy, job.LabelComponent: job.Component},
			Finalizers: []string{Finalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: w.APIVersion, Kind: string(w.Kind), Name: w.Name, UID: w.UID, Controller: ptr(true),
			}},
		},
		Spec: v1alpha1.PrePullImageSpec{
			Policy:             p.name,
			Workload:           v1alpha1.WorkloadReference{APIVersion: w.APIVersion, Kind: w.Kind, Name: w.Name, UID: string(w.UID)},
			Images:             images,
			Nodes:              nodes,
			ImagePullSecrets:   secrets,
			ServiceAccountName: w.Template.ServiceAccountName,
			Mode:               p.spec.Mode,
		},
	}
	u, err := v1alpha1.ToUnstructured(ppi)
	if err != nil {
		return err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.ImageResource).Namespace(w.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("create PrePullImage %s/%s: %w", w.Namespace, name, err)
	}
	c.env.Log.InfoContext(ctx, "PrePullImage created", "prepullimage", w.Namespace+"/"+name, "policy", p.name,
		"workload", string(w.Kind)+"/"+w.Name, "images", workload.UniqueImages(images), "nodes", nodes, "mode", p.spec.Mode)
	return nil
}

// addNodes adds the nodes lacking the images that the PrePullImage does
// not target yet (a node joined or became eligible).
func (c *controller) addNodes(ctx context.Context, obj map[string]any, lacking []string) error {
	var ppi v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(obj, &ppi); err != nil {
		return fmt.Errorf("%w", err)
	}
	if ppi.DeletionTimestamp != nil {
		return nil
	}
	var added []string
	for _, n := range lacking {
		if !slices.Contains(ppi.Spec.Nodes, n) {
			added = append(added, n)
		}
	}
	if len(added) == 0 {
		return nil
	}
	ppi.Spec.Nodes = append(ppi.Spec.Nodes, added...)
	if err := c.update(ctx, &ppi); err != nil {
		return err
	}
	c.env.Log.InfoContext(ctx, "nodes added to a PrePullImage", "prepullimage", ppi.Namespace+"/"+ppi.Name, "nodes", added)
	return nil
}

// reconcilePolicies records each policy's validity and workload count,
// then looks at every workload.
func (c *controller) reconcilePolicies(ctx context.Context) error {
	objs, err := c.objs.list(ctx, c.cfg.Types.Policies)
	if err != nil {
		return err
	}
	set, err := c.readWorkloads(ctx)
	if err != nil {
		return err
	}
	var errs []error
	names := map[string]bool{}
	for _, obj := range objs {
		names[(&unstructured.Unstructured{Object: obj}).GetName()] = true
		errs = append(errs, c.reconcilePolicy(ctx, obj, set))
	}
	c.forgetPolicies(names)
	errs = append(errs, c.reconcileWorkloads(ctx))
	return errors.Join(errs...)
}

// forgetPolicies drops the workload gauges of policies that are gone.
func (c *controller) forgetPolicies(present map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.policies {
		if !present[name] {
			c.metrics.workloads.DeleteLabelValues(name)
		}
	}
	c.policies = present
}

func (c *controller) reconcilePolicy(ctx context.Context, obj map[string]any, set *workloadSet) error {
	var p v1alpha1.PrePullPolicy
	if err := v1alpha1.FromUnstructured(obj, &p); err != nil {
		c.env.Log.WarnContext(ctx, "a policy that does not decode is ignored", "err", err)
		return nil
	}
	before := policyStatusJSON(p.Status)
	valid := v1alpha1.SetValid(&p)
	p.Status.Workloads = 0
	if valid {
		p.Status.Workloads = set.count(&p.Spec)
		c.metrics.workloads.WithLabelValues(p.Name).Set(float64(p.Status.Workloads))
	} else {
		c.metrics.workloads.DeleteLabelValues(p.Name)
	}
	if reflect.DeepEqual(before, policyStatusJSON(p.Status)) {
		return nil
	}
	if err := c.updatePolicyStatus(ctx, &p); err != nil {
		return err
	}
	if !valid {
		c.env.Log.WarnContext(ctx, "invalid PrePullPolicy: it selects nothing", "policy", p.Name,
			"reason", meta(p.Status.Conditions, v1alpha1.ConditionValid))
	}
	return nil
}

// workloadSet is every workload, with its namespace's labels.
type workloadSet struct {
	workloads []*workload.Workload
	nsLabels  map[string]map[string]string
}

func (c *controller) readWorkloads(ctx context.Context) (*workloadSet, error) {
	set := &workloadSet{nsLabels: map[string]map[string]string{}}
	for _, typ := range c.cfg.Types.workloads() {
		objs, err := c.objs.list(ctx, typ)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			w, err := workload.Decode(obj)
			if err != nil {
				continue
			}
			set.workloads = append(set.workloads, w)
			if _, ok := set.nsLabels[w.Namespace]; !ok {
				if set.nsLabels[w.Namespace], err = c.namespaceLabels(ctx, w.Namespace); err != nil {
					return nil, err
				}
			}
		}
	}
	return set, nil
}

// count is how many workloads the policy spec selects.
func (s *workloadSet) count(spec *v1alpha1.PrePullPolicySpec) int32 {
	d := *spec
	d.Default()
	var n int32
	for _, w := range s.workloads {
		if ok, _ := workload.Selects(&d, w, s.nsLabels[w.Namespace]); ok {
			n++
		}
	}
	return n
}

func meta(conds []metav1.Condition, typ string) string {
	for _, c := range conds {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }

// policyStatusJSON is a policy status as it is stored, for comparison.
func policyStatusJSON(s v1alpha1.PrePullPolicyStatus) map[string]any {
	u, _ := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{Status: s})
	st, _ := u["status"].(map[string]any)
	return st
}
