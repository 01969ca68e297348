package k8s_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

// deadline bounds every wait on the API server (RBAC caches, CRDs).
const deadline = 2 * time.Minute

// apiServer is the test control plane with what the tests read from it.
type apiServer struct {
	*kubetest.Env
	mapper meta.RESTMapper
	disc   discovery.DiscoveryInterface
}

func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	k := kubetest.Start(t)
	// The puller's CRDs and, so the monitoring component can be applied,
	// minimal ServiceMonitor, PrometheusRule and cert-manager CRDs: the overlays' custom
	// objects need them served before a dry run can accept them; the
	// Gateway API's, whose status the watcher's role writes.
	k.InstallCRDs(t, "crds", "testdata/servicemonitor-crd.yaml", "testdata/prometheusrule-crd.yaml", "testdata/cert-manager-crds.yaml",
		"../../services/watcher/gwstatus/testdata/crds")
	disc, err := discovery.NewDiscoveryClientForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		t.Fatal(err)
	}
	a := &apiServer{Env: k, mapper: restmapper.NewDiscoveryRESTMapper(groups), disc: disc}
	a.create(t, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace},
	}}, false)
	return a
}

// resource is the client for obj's kind in obj's namespace.
func (a *apiServer) resource(t *testing.T, dyn dynamic.Interface, gvk schema.GroupVersionKind, ns string) dynamic.ResourceInterface {
	t.Helper()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s is not served: %v", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource).Namespace(ns)
	}
	return dyn.Resource(m.Resource)
}

// create applies obj (server-side apply), for real or as a dry run, and
// returns the API server's error.
func (a *apiServer) apply(t *testing.T, obj *unstructured.Unstructured, dryRun bool) error {
	t.Helper()
	opts := metav1.ApplyOptions{FieldManager: "weft-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := a.resource(t, a.Client, obj.GroupVersionKind(), obj.GetNamespace()).Apply(context.Background(), obj.GetName(), obj, opts)
	return err
}

// create applies obj or ends the test.
func (a *apiServer) create(t *testing.T, obj *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	if err := a.apply(t, obj, dryRun); err != nil {
		t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// TestOnAPIServer applies every installation to a real kube-apiserver: each
// object is accepted by a server-side dry run, and each service's
// ServiceAccount, impersonated, can do what the service does and is
// refused what it must not do.
func TestOnAPIServer(t *testing.T) {
	a := startAPIServer(t)
	builds := map[string][]*unstructured.Unstructured{}
	for _, in := range installations {
		builds[in.name] = build(t, in)
	}
	t.Run("dry run", func(t *testing.T) {
		for _, in := range installations {
			t.Run(in.name, func(t *testing.T) {
				for _, o := range builds[in.name] {
					if err := a.apply(t, o, true); err != nil {
						t.Errorf("%s %s refused: %v", o.GetKind(), o.GetName(), err)
					}
				}
			})
		}
	})
	t.Run("renderer webhook rules", func(t *testing.T) { a.checkWebhookRules(t, builds) })
	t.Run("CRDs established", func(t *testing.T) {
		crds := a.Client.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		n := 0
		for _, o := range builds["base"] {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			n++
			got, err := crds.Get(context.Background(), o.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !established(got) {
				t.Errorf("CRD %s is not Established: %v", o.GetName(), got.Object["status"])
			}
		}
		if n != 2 {
			t.Errorf("base holds %d CRDs, want the puller's 2", n)
		}
	})
	t.Run("RBAC rules name served resources", func(t *testing.T) {
		for _, in := range installations {
			for _, o := range builds[in.name] {
				if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
					continue
				}
				r := typed[rbacv1.ClusterRole](t, o)
				for _, p := range a.unservedRules(t, r.Rules) {
					t.Errorf("%s: %s %s: %s", in.name, o.GetKind(), o.GetName(), p)
				}
			}
		}
	})
	t.Run("RBAC", func(t *testing.T) { testRBAC(t, a, builds) })
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// unservedRules names the resources of rules the API server does not
// serve (a misspelt resource grants nothing, silently). The finalizers
// pseudo-subresource is only ever authorized, never served.
func (a *apiServer) unservedRules(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	_, lists, err := a.disc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			served[gv.Group+"/"+r.Name] = true
		}
	}
	var out []string
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				if strings.HasSuffix(r, "/finalizers") {
					r = strings.TrimSuffix(r, "/finalizers")
				}
				if !served[g+"/"+r] {
					out = append(out, fmt.Sprintf("%q in group %q is not served", r, g))
				}
			}
		}
	}
	return out
}

// as is a client impersonating a ServiceAccount of weft-system.
type as struct {
	dyn dynamic.Interface
	cs  kubernetes.Interface
}

func (a *apiServer) as(t *testing.T, sa string) as {
	t.Helper()
	cfg := rest.CopyConfig(a.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + sa}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return as{dyn: dyn, cs: cs}
}

// check is one request a ServiceAccount makes, which must be allowed (and
// succeed) or be refused as forbidden.
type check struct {
	sa, what string
	allowed  bool
	do       func(ctx context.Context, c as) error
}

// run makes the check's request until it gives the expected answer (RBAC
// objects take a moment to reach the authorizer) or the deadline passes.
func (a *apiServer) run(t *testing.T, c check) {
	t.Helper()
	client := a.as(t, c.sa)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var err error
	for {
		if e := c.do(ctx, client); e != nil && ctx.Err() != nil && err != nil {
			break // the deadline's error: keep the last real one
		} else {
			err = e
		}
		switch {
		case c.allowed && err == nil:
			return
		case !c.allowed && apierrors.IsForbidden(err):
			return
		case !c.allowed && err == nil:
			t.Errorf("%s may %s; it must not", c.sa, c.what)
			return
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c.allowed {
		t.Errorf("%s cannot %s: %v", c.sa, c.what, err)
	} else {
		t.Errorf("%s %s: want forbidden, got %v", c.sa, c.what, err)
	}
}

// applyRBAC creates the ServiceAccounts, roles and bindings of objs for
// real, and waits until the authorizer grants every binding's subjects the
// first rule of its role: from then on, a refusal is the roles' answer, not
// a binding not seen yet.
func (a *apiServer) applyRBAC(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	var bindings []*rbacv1.ClusterRoleBinding
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			a.create(t, o, false)
		}
		switch o.GetKind() {
		case "ClusterRole", "Role":
			roles[o.GetKind()+"/"+o.GetName()] = typed[rbacv1.ClusterRole](t, o).Rules
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, typed[rbacv1.ClusterRoleBinding](t, o))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for _, b := range bindings {
		rules := roles[b.RoleRef.Kind+"/"+b.RoleRef.Name]
		if len(rules) == 0 {
			t.Fatalf("binding %s: role %s %s is not in the build or has no rule", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		r := rules[0]
		res, sub, _ := strings.Cut(r.Resources[0], "/")
		for _, s := range b.Subjects {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + s.Namespace + ":" + s.Name,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + s.Namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: b.Namespace, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: res, Subresource: sub,
				},
			}}
			for {
				got, err := a.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err == nil && got.Status.Allowed {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("binding %s: %s is not granted %s %s/%s: %v", b.Name, review.Spec.User, r.Verbs[0], r.APIGroups[0], r.Resources[0], err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

// The objects the checks act on, in a namespace of the cluster's users.
const (
	appNS      = "shop"
	pullSecret = "registry"
	gatedPod   = "web-0"
	appSA      = "web"
	appIngress = "web"
	appService = "web"
)

func (a *apiServer) fixtures(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cs := a.Clientset
	must := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.CoreV1().ServiceAccounts(appNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: appSA}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.CoreV1().Secrets(appNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: pullSecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cs.CoreV1().Pods(appNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: gatedPod, Labels: map[string]string{"weft.io/gated": "true"}},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "weft.io/images"}},
			Containers:      []corev1.Container{{Name: "web", Image: "registry.example/web:1"}},
		},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cs.CoreV1().Services(appNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: appService},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cs.NetworkingV1().Ingresses(appNS).Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: appIngress},
		Spec: networkingv1.IngressSpec{IngressClassName: ptr("weft"), DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: appService, Port: networkingv1.ServiceBackendPort{Number: 80}}}},
	}, metav1.CreateOptions{})
	must(err)
}

var (
	ppiGVR = schema.GroupVersionResource{Group: "weft.io", Version: "v1alpha1", Resource: "prepullimages"}
	ppGVR  = schema.GroupVersionResource{Group: "weft.io", Version: "v1alpha1", Resource: "prepullpolicies"}
)

func prePullImage(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "weft.io/v1alpha1", "kind": "PrePullImage",
		"metadata": map[string]any{"name": name, "namespace": appNS},
		"spec": map[string]any{
			"policy":   "web",
			"workload": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
			"images":   []any{map[string]any{"container": "web", "image": "registry.example/web:1"}},
		},
	}}
}

func pullJob(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "weft", "app.kubernetes.io/component": "puller",
		}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pull", Image: "registry.example/web:1", Command: []string{"/weft/weft-noop"}}},
		}}},
	}
}

func testRBAC(t *testing.T, a *apiServer, builds map[string][]*unstructured.Unstructured) {
	a.fixtures(t)
	var n int
	name := func(prefix string) string { n++; return fmt.Sprintf("%s-%d", prefix, n) }
	services := []check{
		// the services that never talk to the API server
		{"weft-renderer", "list pods", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"weft-validator", "get configmaps", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, "weft-config", metav1.GetOptions{})
			return err
		}},
		{"weft-deployer", "list pods", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		// the watcher reads; it never writes
		{"weft-watcher", "create a configmap", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().ConfigMaps(appNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name("w")}}, metav1.CreateOptions{})
			return err
		}},
		{"weft-watcher", "delete a pod", false, func(ctx context.Context, c as) error {
			return c.cs.CoreV1().Pods(appNS).Delete(ctx, gatedPod, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		// ... except the status of Ingresses (ingress_status)
		{"weft-watcher", "update an ingress status", true, func(ctx context.Context, c as) error {
			ing, err := a.Clientset.NetworkingV1().Ingresses(appNS).Get(ctx, appIngress, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("as administrator: %w", err)
			}
			ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.10"}}
			_, err = c.cs.NetworkingV1().Ingresses(appNS).UpdateStatus(ctx, ing, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"weft-watcher", "update an ingress", false, func(ctx context.Context, c as) error {
			ing, err := a.Clientset.NetworkingV1().Ingresses(appNS).Get(ctx, appIngress, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("as administrator: %w", err)
			}
			ing.Spec.IngressClassName = ptr("other")
			_, err = c.cs.NetworkingV1().Ingresses(appNS).Update(ctx, ing, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		// ... and the status of the Gateway API objects (gateway_status),
		// whether or not their CRDs are installed
		{"weft-watcher", "read Gateway API objects and update and patch their status", true, func(ctx context.Context, c as) error {
			for _, r := range []string{"gatewayclasses", "gateways", "httproutes"} {
				for _, v := range []string{"get", "list", "watch"} {
					if err := accessReview(ctx, c, v, r, ""); err != nil {
						return err
					}
				}
				for _, v := range []string{"update", "patch"} {
					if err := accessReview(ctx, c, v, r, "status"); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"weft-watcher", "update a gateway", false, func(ctx context.Context, c as) error {
			return accessReview(ctx, c, "update", "gateways", "")
		}},
		{"weft-watcher", "update a service status", false, func(ctx context.Context, c as) error {
			svc, err := a.Clientset.CoreV1().Services(appNS).Get(ctx, appService, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("as administrator: %w", err)
			}
			_, err = c.cs.CoreV1().Services(appNS).UpdateStatus(ctx, svc, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		// the node agent: pull secrets by name, nothing else
		{"weft-puller-agent", "get a pull secret", true, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(appNS).Get(ctx, pullSecret, metav1.GetOptions{})
			return err
		}},
		{"weft-puller-agent", "list secrets of another namespace", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(appNS).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"weft-puller-agent", "create a pod", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Pods(appNS).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name("p")},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		// the puller's controller
		{"weft-puller-controller", "create, update, update the status of and delete a PrePullImage", true, func(ctx context.Context, c as) error {
			r := c.dyn.Resource(ppiGVR).Namespace(appNS)
			u, err := r.Create(ctx, prePullImage(name("ppi")), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			u.SetFinalizers([]string{"weft.io/pull-status"})
			if u, err = r.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				return err
			}
			_ = unstructured.SetNestedField(u.Object, "InProgress", "status", "phase")
			if _, err := r.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
				return err
			}
			return r.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		}},
		{"weft-puller-controller", "create and delete a pull Job", true, func(ctx context.Context, c as) error {
			j, err := c.cs.BatchV1().Jobs(appNS).Create(ctx, pullJob(name("pull")), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			bg := metav1.DeletePropagationBackground
			return c.cs.BatchV1().Jobs(appNS).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		}},
		{"weft-puller-controller", "get a workload's ServiceAccount", true, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().ServiceAccounts(appNS).Get(ctx, appSA, metav1.GetOptions{})
			return err
		}},
		{"weft-puller-controller", "list gated pods and patch one", true, func(ctx context.Context, c as) error {
			if _, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "weft.io/gated"}); err != nil {
				return err
			}
			patch := `[{"op":"test","path":"/metadata/name","value":"` + gatedPod + `"}]`
			_, err := c.cs.CoreV1().Pods(appNS).Patch(ctx, gatedPod, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}},
		{"weft-puller-controller", "create an Event", true, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Events(appNS).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: name("ev")},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: appNS, Name: gatedPod, APIVersion: "v1"},
				Reason:         "ImagesWarm", Message: "images warm", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "weft-puller"},
			}, metav1.CreateOptions{})
			return err
		}},
		{"weft-puller-controller", "update a PrePullPolicy's status", true, func(ctx context.Context, c as) error {
			r := c.dyn.Resource(ppGVR)
			// created by an administrator; the controller only writes status
			p := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "weft.io/v1alpha1", "kind": "PrePullPolicy",
				"metadata": map[string]any{"name": name("policy")},
				"spec":     map[string]any{"workloads": map[string]any{"namespaces": []any{appNS}, "selector": map[string]any{}}},
			}}
			u, err := a.Client.Resource(ppGVR).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("as administrator: %w", err)
			}
			_ = unstructured.SetNestedField(u.Object, int64(1), "status", "observedGeneration")
			_, err = r.UpdateStatus(ctx, u, metav1.UpdateOptions{})
			return err
		}},
		{"weft-puller-controller", "read a secret", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(appNS).Get(ctx, pullSecret, metav1.GetOptions{})
			return err
		}},
		{"weft-puller-controller", "create a pod", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Pods(appNS).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name("p")},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"weft-puller-controller", "update a PrePullPolicy's spec", false, func(ctx context.Context, c as) error {
			l, err := a.Client.Resource(ppGVR).List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) == 0 {
				return fmt.Errorf("no policy to update (as administrator): %v", err)
			}
			_, err = c.dyn.Resource(ppGVR).Update(ctx, &l.Items[0], metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
	}

	// the key Job: its own namespace's NATS Secrets only
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"seed": "x"}}
	}
	keys := []check{
		{"weft-nats-keys", "create weft-nats-auth and read and update it", true, func(ctx context.Context, c as) error {
			s, err := c.cs.CoreV1().Secrets(namespace).Create(ctx, secret(namespace, "weft-nats-auth"), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				s, err = c.cs.CoreV1().Secrets(namespace).Get(ctx, "weft-nats-auth", metav1.GetOptions{})
			}
			if err != nil {
				return err
			}
			_, err = c.cs.CoreV1().Secrets(namespace).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"weft-nats-keys", "create a role's Secret", true, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(namespace).Create(ctx, secret(namespace, "weft-nats-renderer"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"weft-nats-keys", "read another Secret of its namespace", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(namespace).Get(ctx, "weft-haproxy-dataplane", metav1.GetOptions{})
			return err
		}},
		{"weft-nats-keys", "list the Secrets of its namespace", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"weft-nats-keys", "read a Secret of another namespace", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(appNS).Get(ctx, pullSecret, metav1.GetOptions{})
			return err
		}},
		{"weft-nats-keys", "create a Secret in another namespace", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets(appNS).Create(ctx, secret(appNS, "weft-nats-auth"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"weft-nats-keys", "delete a role's Secret", false, func(ctx context.Context, c as) error {
			return c.cs.CoreV1().Secrets(namespace).Delete(ctx, "weft-nats-auth", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
	}

	t.Run("base", func(t *testing.T) {
		a.applyRBAC(t, builds["base"])
		for _, c := range append(services, keys...) {
			t.Run(c.sa+" "+c.what, func(t *testing.T) { a.run(t, c) })
		}
		a.watches(t, "weft-watcher", "base/weft.yaml")
		// base watches no Secret and no Ingress
		a.run(t, check{"weft-watcher", "list secrets", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}})
	})
	t.Run("ingress", func(t *testing.T) {
		a.applyRBAC(t, builds["ingress"])
		a.watches(t, "weft-watcher", "overlays/ingress/weft.yaml")
		a.run(t, check{"weft-watcher", "list ingresses", true, func(ctx context.Context, c as) error {
			_, err := c.cs.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
			return err
		}})
		a.run(t, check{"weft-watcher", "update a secret", false, func(ctx context.Context, c as) error {
			s, err := a.Clientset.CoreV1().Secrets(appNS).Get(ctx, pullSecret, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("as administrator: %w", err)
			}
			_, err = c.cs.CoreV1().Secrets(appNS).Update(ctx, s, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}})
		a.run(t, check{"weft-haproxy", "list pods", false, func(ctx context.Context, c as) error {
			_, err := c.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			return err
		}})
	})
	t.Run("site", func(t *testing.T) {
		// the site's deployer and leaf node never talk to the API server;
		// its key Job has the hub's rights
		a.applyRBAC(t, builds["site"])
		for _, c := range keys {
			a.run(t, c)
		}
		for _, sa := range []string{"weft-deployer", "weft-nats"} {
			a.run(t, check{sa, "list pods", false, func(ctx context.Context, c as) error {
				_, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				return err
			}})
		}
	})
	t.Run("single", func(t *testing.T) {
		a.applyRBAC(t, builds["single"])
		a.watches(t, "weft", "overlays/single/weft.yaml")
		for _, c := range []check{
			{"weft", "list secrets", false, func(ctx context.Context, c as) error {
				_, err := c.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
				return err
			}},
			{"weft", "create a configmap", false, func(ctx context.Context, c as) error {
				_, err := c.cs.CoreV1().ConfigMaps(appNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name("w")}}, metav1.CreateOptions{})
				return err
			}},
		} {
			a.run(t, c)
		}
	})
}

// watches checks that sa can list and watch every type weftYAML watches,
// where and as the watcher does (namespace, label and field selectors).
func (a *apiServer) watches(t *testing.T, sa, weftYAML string) {
	t.Helper()
	cfg, err := config.Load(weftYAML)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(cfg.WatchedResources))
	for name := range cfg.WatchedResources {
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		t.Fatalf("%s watches nothing", weftYAML)
	}
	for _, name := range names {
		r := cfg.WatchedResources[name]
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil {
			t.Fatal(err)
		}
		gvk := gv.WithKind(r.Kind)
		a.run(t, check{sa, fmt.Sprintf("list and watch %s (%s, %s)", name, gvk, weftYAML), true, func(ctx context.Context, c as) error {
			res := a.resource(t, c.dyn, gvk, r.Namespace)
			opts := metav1.ListOptions{LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector}
			if _, err := res.List(ctx, opts); err != nil {
				return err
			}
			w, err := res.Watch(ctx, opts)
			if err != nil {
				return err
			}
			w.Stop()
			return nil
		}})
	}
}

func ptr[T any](v T) *T { return &v }

// accessReview asks the API server whether c may verb the Gateway API
// resource (and subresource), as a Forbidden error when it may not.
func accessReview(ctx context.Context, c as, verb, resource, subresource string) error {
	r, err := c.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: appNS, Verb: verb, Group: "gateway.networking.k8s.io", Resource: resource, Subresource: subresource,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if !r.Status.Allowed {
		gr := schema.GroupResource{Group: "gateway.networking.k8s.io", Resource: resource + "/" + subresource}
		return apierrors.NewForbidden(gr, "", fmt.Errorf("%s denied: %s", verb, r.Status.Reason))
	}
	return nil
}
