package v1alpha1_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// TestValidatePolicy: what the schema cannot say (label syntax, resource
// names and amounts) and, for policies that never met the schema, what it
// can.
func TestValidatePolicy(t *testing.T) {
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.PrePullPolicySpec)
		want   []string // one substring per expected error, in order
	}{
		{"defaults", func(*v1alpha1.PrePullPolicySpec) {}, nil},
		{"no selector", func(s *v1alpha1.PrePullPolicySpec) { s.Workloads.Selector = nil }, []string{"spec.workloads.selector: Required value"}},
		{"label key", func(s *v1alpha1.PrePullPolicySpec) {
			s.Workloads.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app key!": "web"}}
		}, []string{`spec.workloads.selector.matchLabels: Invalid value: "app key!"`}},
		{"label value", func(s *v1alpha1.PrePullPolicySpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"a b"}}}}
		}, []string{`spec.nodeSelector.matchExpressions[0].values[0]: Invalid value: "a b"`}},
		{"operator", func(s *v1alpha1.PrePullPolicySpec) {
			s.Workloads.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Equals", Values: []string{"web"}}}}
		}, []string{`spec.workloads.namespaceSelector.matchExpressions[0].operator: Invalid value: "Equals"`}},
		{"namespace name", func(s *v1alpha1.PrePullPolicySpec) {
			s.Workloads.Namespaces = []string{"shop", "Shop_2"}
		}, []string{`spec.workloads.namespaces[1]: Invalid value: "Shop_2"`}},
		{"mode", func(s *v1alpha1.PrePullPolicySpec) { s.Mode = "docker" }, []string{`spec.mode: Unsupported value: "docker"`}},
		{"kind", func(s *v1alpha1.PrePullPolicySpec) { s.Workloads.Kinds = []v1alpha1.WorkloadKind{"CronJob"} }, []string{`spec.workloads.kinds[0]: Unsupported value: "CronJob"`}},
		{"limits", func(s *v1alpha1.PrePullPolicySpec) {
			s.Limits = v1alpha1.Limits{Cluster: 3, PerNode: 4, PerRegistry: -1}
		}, []string{
			"spec.limits.perNode: Invalid value: 4: must not exceed cluster (3)",
			"spec.limits.perRegistry: Invalid value: -1: must be at least 1",
		}},
		{"retry", func(s *v1alpha1.PrePullPolicySpec) {
			s.Retry = v1alpha1.Retry{MaxAttempts: -2, Backoff: d(time.Minute), MaxBackoff: d(time.Second)}
		}, []string{
			"spec.retry.maxAttempts: Invalid value: -2: must be at least 1",
			`spec.retry.maxBackoff: Invalid value: "1s": must not be shorter than backoff (1m0s)`,
		}},
		{"durations", func(s *v1alpha1.PrePullPolicySpec) {
			s.Job.Timeout, s.GateTimeout, s.TTL = d(0), d(-time.Second), d(-time.Minute)
		}, []string{
			`spec.job.timeout: Invalid value: "0s": must be positive`,
			`spec.gateTimeout: Invalid value: "-1s": must be positive`,
			`spec.ttl: Invalid value: "-1m0s": must not be negative`,
		}},
		{"resources", func(s *v1alpha1.PrePullPolicySpec) {
			s.Job.Resources = &v1alpha1.Resources{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi"), "bad name!": resource.MustParse("1")},
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("-10m")},
			}
		}, []string{
			`spec.job.resources.limits[bad name!]: Invalid value: "bad name!"`,
			`spec.job.resources.requests[cpu]: Invalid value: "-10m": must not be negative`,
			`spec.job.resources.requests[memory]: Invalid value: "32Mi": must not exceed the limit (16Mi)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := v1alpha1.PrePullPolicySpec{Workloads: v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{}}}
			s.Default()
			tc.change(&s)
			errs := v1alpha1.ValidatePolicy(&s)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d errors, want %d: %v", len(errs), len(tc.want), errs)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d: %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
			c := v1alpha1.ValidCondition(7, errs)
			if (c.Status == metav1.ConditionTrue) != (len(tc.want) == 0) || c.ObservedGeneration != 7 {
				t.Errorf("condition %+v", c)
			}
		})
	}
}

// TestUnstructuredRoundTrip: ToUnstructured sets apiVersion and kind, and
// FromUnstructured refuses an object of another kind.
func TestUnstructuredRoundTrip(t *testing.T) {
	in := &v1alpha1.PrePullImage{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: v1alpha1.PrePullImageSpec{
			Policy:   "all",
			Workload: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Images:   []v1alpha1.ContainerImage{{Container: "web", Image: "nginx:1.27"}},
			Nodes:    []string{"a"},
		},
	}
	u, err := v1alpha1.ToUnstructured(in)
	if err != nil {
		t.Fatal(err)
	}
	if u["apiVersion"] != "weft.io/v1alpha1" || u["kind"] != "PrePullImage" {
		t.Fatalf("apiVersion %v kind %v", u["apiVersion"], u["kind"])
	}
	var out v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(u, &out); err != nil {
		t.Fatal(err)
	}
	if out.Spec.Images[0].Image != "nginx:1.27" || out.Spec.Workload.Name != "web" {
		t.Errorf("round trip: %+v", out.Spec)
	}
	var p v1alpha1.PrePullPolicy
	if err := v1alpha1.FromUnstructured(u, &p); err == nil || !strings.Contains(err.Error(), "kind PrePullImage") {
		t.Errorf("a PrePullImage decoded as a policy: %v", err)
	}
}

// TestContainerImages: init containers (marked) then containers.
func TestContainerImages(t *testing.T) {
	got := v1alpha1.ContainerImages(&corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "migrate", Image: "web/migrate:1"}},
		Containers:     []corev1.Container{{Name: "web", Image: "web:1"}, {Name: "proxy", Image: "envoy:1"}},
	})
	want := []v1alpha1.ContainerImage{
		{Container: "migrate", Image: "web/migrate:1", Init: true},
		{Container: "web", Image: "web:1"},
		{Container: "proxy", Image: "envoy:1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
