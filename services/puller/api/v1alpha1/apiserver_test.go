package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// object parses a YAML manifest.
func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("manifest: %v\n%s", err, manifest)
	}
	return u
}

// policy is a PrePullPolicy manifest named name with the given spec lines
// (indented by two spaces).
func policy(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	return object(t, "apiVersion: weft.io/v1alpha1\nkind: PrePullPolicy\nmetadata:\n  name: "+name+"\nspec:\n"+indent(spec, "  "))
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = by + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// table gets the API server's table of the resources at path (what
// kubectl get prints: the printer columns), one line per row with the
// cells joined by spaces, headers first.
func table(t *testing.T, k *kubetest.Env, path string) []string {
	t.Helper()
	client, err := rest.HTTPClientFor(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(k.Config.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", path, resp.Status, err, body)
	}
	var tab metav1.Table
	if err := json.Unmarshal(body, &tab); err != nil {
		t.Fatal(err)
	}
	var header []string
	for _, c := range tab.ColumnDefinitions {
		header = append(header, c.Name)
	}
	lines := []string{strings.Join(header, " ")}
	for _, r := range tab.Rows {
		cells := make([]string, len(r.Cells))
		for i, c := range r.Cells {
			if c == nil {
				c = "<none>"
			}
			cells[i] = fmt.Sprint(c)
		}
		lines = append(lines, strings.Join(cells, " "))
	}
	return lines
}

// kube starts an API server with the puller's CRDs installed.
func kube(t *testing.T) *kubetest.Env {
	t.Helper()
	k := kubetest.Start(t)
	k.InstallCRDs(t, crdDir)
	return k
}

// TestPolicyAdmission creates policies on a real API server: valid ones
// are stored with the schema's defaults, which equal the Go defaults;
// invalid ones are refused with a message naming the problem.
func TestPolicyAdmission(t *testing.T) {
	k := kube(t)
	ctx := context.Background()
	policies := k.Client.Resource(v1alpha1.PolicyResource)

	valid := []struct {
		name, spec string
	}{
		{"minimal", "workloads:\n  selector: {}\n"},
		{"full", `workloads:
  kinds: [Deployment, DaemonSet]
  namespaces: [shop, blog]
  namespaceSelector:
    matchLabels: {team: web}
  selector:
    matchExpressions:
    - {key: app, operator: In, values: [web, api]}
    - {key: legacy, operator: DoesNotExist}
nodeSelector:
  matchExpressions:
  - {key: pool, operator: NotIn, values: [batch]}
  - {key: zone, operator: Exists}
mode: job
limits: {cluster: 20, perNode: 20, perRegistry: 5}
retry: {maxAttempts: 5, backoff: 1m30s, maxBackoff: 1h}
ttl: 0s
job:
  timeout: 30m
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {cpu: 100m, memory: 64Mi}
gate: true
gateTimeout: 15m
`},
	}
	for _, tc := range valid {
		t.Run("valid/"+tc.name, func(t *testing.T) {
			in := policy(t, tc.name, tc.spec)
			var want v1alpha1.PrePullPolicy
			if err := v1alpha1.FromUnstructured(in.Object, &want); err != nil {
				t.Fatal(err)
			}
			want.Spec.Default()
			created, err := policies.Create(ctx, in, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var got v1alpha1.PrePullPolicy
			if err := v1alpha1.FromUnstructured(created.Object, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Spec, want.Spec) {
				t.Errorf("stored spec (schema defaults) differs from Go defaults:\n got %+v\nwant %+v", got.Spec, want.Spec)
			}
			if errs := v1alpha1.ValidatePolicy(&got.Spec); len(errs) > 0 {
				t.Errorf("ValidatePolicy refuses what the API server accepted: %v", errs)
			}
		})
	}

	// Each is refused by ValidatePolicy too (a policy from a folder of
	// manifests meets no schema), or by decoding, except those of
	// goDefaults: an explicit 0 is unset to Go, and Default fills it.
	goDefaults := map[string]bool{"zero per-node limit": true, "zero attempts": true}
	invalid := []struct {
		name, spec string
		want       []string
	}{
		{"selector operator", "workloads:\n  selector:\n    matchExpressions:\n    - {key: app, operator: Equals, values: [web]}\n",
			[]string{`spec.workloads.selector.matchExpressions[0].operator`, `Unsupported value: "Equals"`}},
		{"In without values", "workloads:\n  selector:\n    matchExpressions:\n    - {key: app, operator: In}\n",
			[]string{`spec.workloads.selector.matchExpressions[0]`, "values must be non-empty when operator is In or NotIn"}},
		{"Exists with values", "workloads:\n  selector: {}\nnodeSelector:\n  matchExpressions:\n  - {key: gpu, operator: Exists, values: [a100]}\n",
			[]string{`spec.nodeSelector.matchExpressions[0]`, "empty when it is Exists or DoesNotExist"}},
		{"negative cluster limit", "workloads:\n  selector: {}\nlimits: {cluster: -1}\n",
			[]string{"spec.limits.cluster", "should be greater than or equal to 1"}},
		{"zero per-node limit", "workloads:\n  selector: {}\nlimits: {perNode: 0}\n",
			[]string{"spec.limits.perNode", "should be greater than or equal to 1"}},
		{"per-node above cluster", "workloads:\n  selector: {}\nlimits: {cluster: 2, perNode: 3}\n",
			[]string{"spec.limits.perNode", "perNode must not exceed cluster"}},
		{"per-node above the default cluster", "workloads:\n  selector: {}\nlimits: {perNode: 11}\n",
			[]string{"spec.limits.perNode", "perNode must not exceed cluster"}},
		{"per-registry above cluster", "workloads:\n  selector: {}\nlimits: {cluster: 3, perRegistry: 4}\n",
			[]string{"spec.limits.perRegistry", "perRegistry must not exceed cluster"}},
		{"unknown mode", "workloads:\n  selector: {}\nmode: docker\n",
			[]string{"spec.mode", `Unsupported value: "docker"`, `"cri"`, `"job"`}},
		{"unknown workload kind", "workloads:\n  kinds: [CronJob]\n  selector: {}\n",
			[]string{"spec.workloads.kinds[0]", `Unsupported value: "CronJob"`}},
		{"namespace name", "workloads:\n  namespaces: [Shop_2]\n  selector: {}\n",
			[]string{"spec.workloads.namespaces[0]", "should match"}},
		{"no workload selector", "workloads:\n  namespaces: [shop]\n",
			[]string{"spec.workloads.selector", "Required value"}},
		{"zero attempts", "workloads:\n  selector: {}\nretry: {maxAttempts: 0}\n",
			[]string{"spec.retry.maxAttempts", "should be greater than or equal to 1"}},
		{"duration not Go's", "workloads:\n  selector: {}\nretry: {backoff: 30 seconds}\n",
			[]string{"spec.retry.backoff", "should match"}},
		{"zero backoff", "workloads:\n  selector: {}\nretry: {backoff: 0s}\n",
			[]string{"spec.retry.backoff", "must be positive"}},
		{"max backoff below backoff", "workloads:\n  selector: {}\nretry: {backoff: 5m, maxBackoff: 1m}\n",
			[]string{"spec.retry.maxBackoff", "maxBackoff must not be shorter than backoff"}},
		{"zero job timeout", "workloads:\n  selector: {}\njob: {timeout: 0s}\n",
			[]string{"spec.job.timeout", "must be positive"}},
		{"zero gate timeout", "workloads:\n  selector: {}\ngate: true\ngateTimeout: 0m\n",
			[]string{"spec.gateTimeout", "must be positive"}},
		{"resource quantity", "workloads:\n  selector: {}\njob:\n  resources:\n    limits: {cpu: lots}\n",
			[]string{"spec.job.resources.limits.cpu", "should match"}},
	}
	for _, tc := range invalid {
		t.Run("invalid/"+tc.name, func(t *testing.T) {
			in := policy(t, "p", tc.spec)
			var p v1alpha1.PrePullPolicy
			if err := v1alpha1.FromUnstructured(in.Object, &p); err == nil {
				p.Spec.Default()
				if errs := v1alpha1.ValidatePolicy(&p.Spec); (len(errs) == 0) != goDefaults[tc.name] {
					t.Errorf("ValidatePolicy: %v", errs)
				}
			}
			_, err := policies.Create(ctx, in, metav1.CreateOptions{})
			if err == nil {
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("refused but not as invalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestPolicyStatus records ValidatePolicy's verdict on a policy the schema
// accepts but the puller refuses (a label key that is no label key) in the
// status subresource, and the printer columns show it.
func TestPolicyStatus(t *testing.T) {
	k := kube(t)
	ctx := context.Background()
	policies := k.Client.Resource(v1alpha1.PolicyResource)
	for _, tc := range []struct {
		name, spec string
		valid      bool
		message    string
	}{
		{"good", "workloads:\n  selector: {matchLabels: {app: web}}\nmode: job\nlimits: {cluster: 8}\n", true, "the policy is valid"},
		{"bad-key", "workloads:\n  selector: {matchLabels: {'app key!': web}}\n", false, "spec.workloads.selector.matchLabels: Invalid value: \"app key!\""},
	} {
		created, err := policies.Create(ctx, policy(t, tc.name, tc.spec), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var p v1alpha1.PrePullPolicy
		if err := v1alpha1.FromUnstructured(created.Object, &p); err != nil {
			t.Fatal(err)
		}
		if got := v1alpha1.SetValid(&p); got != tc.valid {
			t.Errorf("%s: SetValid = %v", tc.name, got)
		}
		u, err := v1alpha1.ToUnstructured(&p)
		if err != nil {
			t.Fatal(err)
		}
		updated, err := policies.UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s: update status: %v", tc.name, err)
		}
		var back v1alpha1.PrePullPolicy
		if err := v1alpha1.FromUnstructured(updated.Object, &back); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(back.Status.Conditions, v1alpha1.ConditionValid)
		switch {
		case c == nil:
			t.Fatalf("%s: no Valid condition stored: %+v", tc.name, back.Status)
		case (c.Status == metav1.ConditionTrue) != tc.valid:
			t.Errorf("%s: Valid=%s", tc.name, c.Status)
		case !tc.valid && c.Reason != v1alpha1.ReasonInvalidSpec:
			t.Errorf("%s: reason %q", tc.name, c.Reason)
		case !strings.Contains(c.Message, tc.message):
			t.Errorf("%s: message %q lacks %q", tc.name, c.Message, tc.message)
		case back.Status.ObservedGeneration != back.Generation || c.ObservedGeneration != back.Generation:
			t.Errorf("%s: observed generation %d/%d of %d", tc.name, back.Status.ObservedGeneration, c.ObservedGeneration, back.Generation)
		}
	}

	lines := table(t, k, "/apis/weft.io/v1alpha1/prepullpolicies")
	if len(lines) != 3 {
		t.Fatalf("table of prepullpolicies:\n%s", strings.Join(lines, "\n"))
	}
	for i, want := range []string{
		"Name Mode Cluster Per-Node Gate Workloads Valid Age",
		"bad-key cri 10 2 false <none> False",
		"good job 8 2 false <none> True",
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("table line %d: %q, want it to start with %q", i, lines[i], want)
		}
	}
}

// imageManifest is a PrePullImage in namespace default.
const imageManifest = `apiVersion: weft.io/v1alpha1
kind: PrePullImage
metadata:
  name: web
  namespace: default
spec:
  policy: all
  workload: {apiVersion: apps/v1, kind: Deployment, name: web, uid: 5b0f6c1e-8a43-4c1f-9c55-2f0f3c9e7a10}
  images:
  - {container: migrate, image: registry.example.com/web/migrate:1.2, init: true}
  - {container: web, image: registry.example.com/web@sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9}
  nodes: [node-a, node-b]
  imagePullSecrets: [{name: registry-creds}]
  serviceAccountName: web
  mode: job
`

// TestImageAdmission creates a PrePullImage, writes per-node status
// through the status subresource, and checks what the schema refuses.
func TestImageAdmission(t *testing.T) {
	k := kube(t)
	ctx := context.Background()
	images := k.Client.Resource(v1alpha1.ImageResource).Namespace("default")

	created, err := images.Create(ctx, object(t, imageManifest), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	var ppi v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(created.Object, &ppi); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now().Rfc3339Copy()
	ppi.Status = v1alpha1.PrePullImageStatus{
		ObservedGeneration: ppi.Generation,
		Phase:              v1alpha1.ImageInProgress,
		Nodes: []v1alpha1.NodeStatus{
			{Node: "node-a", Phase: v1alpha1.NodePulled, Attempts: 1, StartTime: &now, CompletionTime: &now},
			{Node: "node-b", Phase: v1alpha1.NodePending, Attempts: 2, StartTime: &now, NextAttemptTime: &now, Message: "registry answered 429 Too Many Requests"},
		},
		NodesTotal: 2, NodesPulled: 1, StartTime: &now,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionWarm, Status: metav1.ConditionFalse, Reason: "Pulling", Message: "1 of 2 nodes pulled", LastTransitionTime: now}},
	}
	u, err := v1alpha1.ToUnstructured(&ppi)
	if err != nil {
		t.Fatal(err)
	}
	updated, err := images.UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status refused: %v", err)
	}
	var back v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(updated.Object, &back); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(back.Status, ppi.Status) {
		t.Errorf("status read back differs:\n got %+v\nwant %+v", back.Status, ppi.Status)
	}
	lines := table(t, k, "/apis/weft.io/v1alpha1/namespaces/default/prepullimages")
	for i, want := range []string{"Name Kind Workload Phase Nodes Pulled Failed Age", "web Deployment web InProgress 2 1 <none> "} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
			t.Errorf("table of prepullimages:\n%s\nwant line %d to start with %q", strings.Join(lines, "\n"), i, want)
		}
	}

	for _, tc := range []struct {
		name   string
		change func(u *unstructured.Unstructured)
		update func(ctx context.Context, ri dynamic.ResourceInterface, u *unstructured.Unstructured) error
		want   []string
	}{
		{"workload changed", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "other", "spec", "workload", "name")
		}, update, []string{"spec.workload", "workload is immutable"}},
		{"no images", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{}, "spec", "images")
		}, update, []string{"spec.images", "should have at least 1 items"}},
		{"container named twice", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{
				map[string]any{"container": "web", "image": "a"}, map[string]any{"container": "web", "image": "b"},
			}, "spec", "images")
		}, update, []string{"spec.images[1]", "Duplicate value"}},
		{"unknown workload kind", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Job", "spec", "workload", "kind")
		}, update, []string{"spec.workload.kind", `Unsupported value: "Job"`}},
		{"unknown phase", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Done", "status", "phase")
		}, updateStatus, []string{"status.phase", `Unsupported value: "Done"`}},
		{"unknown node phase", func(u *unstructured.Unstructured) {
			nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
			nodes[0].(map[string]any)["phase"] = "Warm"
			_ = unstructured.SetNestedSlice(u.Object, nodes, "status", "nodes")
		}, updateStatus, []string{"status.nodes[0].phase", `Unsupported value: "Warm"`}},
		{"negative attempts", func(u *unstructured.Unstructured) {
			nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
			nodes[1].(map[string]any)["attempts"] = int64(-1)
			_ = unstructured.SetNestedSlice(u.Object, nodes, "status", "nodes")
		}, updateStatus, []string{"status.nodes[1].attempts", "should be greater than or equal to 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := updated.DeepCopy()
			tc.change(u)
			err := tc.update(ctx, images, u)
			if err == nil {
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("refused but not as invalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func update(ctx context.Context, ri dynamic.ResourceInterface, u *unstructured.Unstructured) error {
	_, err := ri.Update(ctx, u, metav1.UpdateOptions{})
	return err
}

func updateStatus(ctx context.Context, ri dynamic.ResourceInterface, u *unstructured.Unstructured) error {
	_, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}
