package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/webhook"
)

var testTypes = gate.Types{Policies: "policies", Deployments: "deployments", ReplicaSets: "replicasets", StatefulSets: "statefulsets"}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func logger(t testing.TB) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }

// putPolicy writes a gated policy selecting workloads labelled
// prepull=gate to the resources bucket.
func putPolicy(t testing.TB, bus *testkit.Bus, timeout time.Duration) {
	t.Helper()
	u, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "gated"},
		Spec: v1alpha1.PrePullPolicySpec{
			Workloads:   v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"prepull": "gate"}}},
			Gate:        true,
			GateTimeout: &metav1.Duration{Duration: timeout},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.PutResource(t, bus.JS, "k8s", "policies", u)
}

// putObject writes a typed object, as the API server returned it, to the
// resources bucket.
func putObject(t testing.TB, bus *testkit.Bus, typ, apiVersion, kind string, obj runtime.Object) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u["apiVersion"], u["kind"] = apiVersion, kind
	testkit.PutResource(t, bus.JS, "k8s", typ, u)
}

func review(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func podRequest(t testing.TB, pod *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID: "req-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: pod.Namespace,
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
	}
}

func ownedPod(namespace, rs, hash string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, GenerateName: rs + "-", Labels: map[string]string{"pod-template-hash": hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: "rs-uid", Controller: &yes}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/web:1"}}},
	}
}

// TestReviews sends requests straight to the handler: what is no
// AdmissionReview gets a clear 4xx and never a panic; a review the webhook
// cannot decide on admits the pod unchanged with a warning; a gated pod
// gets the patch.
func TestReviews(t *testing.T) {
	bus := testkit.NATS(t)
	putPolicy(t, bus, time.Minute)
	dep := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"namespace": "shop", "name": "web", "uid": "d-web", "labels": map[string]any{"prepull": "gate"}}}
	testkit.PutResource(t, bus.JS, "k8s", "deployments", dep)

	notReady := gate.NewView(bus.JS, testTypes, logger(t)) // never run
	view := gate.NewView(bus.JS, testTypes, logger(t))
	testkit.Run(t, view.Run)
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := view.Decide(context.Background(), &corev1.Pod{})
		return err
	})

	type answer struct {
		status   int
		body     string // in the error text, or a warning
		gated    bool
		warning  bool
		errLabel string // webhook error reason counted
	}
	huge := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":"`), bytes.Repeat([]byte("a"), 8<<20)...)
	notPod := podRequest(t, ownedPod("shop", "web-abc", "abc"))
	notPod.Object.Raw = []byte(`{"spec":{"containers":"not a list"}}`)
	update := podRequest(t, ownedPod("shop", "web-abc", "abc"))
	update.Operation = admissionv1.Update
	for _, tc := range []struct {
		name    string
		decider webhook.Decider
		method  string
		path    string
		ctype   string
		body    []byte
		want    answer
	}{
		{name: "not JSON", body: []byte("{not json"), want: answer{status: 400, body: "malformed AdmissionReview", errLabel: "malformed"}},
		{name: "another kind", body: []byte(`{"apiVersion":"v1","kind":"Pod"}`), want: answer{status: 400, body: `kind "Pod"`, errLabel: "malformed"}},
		{name: "no request", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), want: answer{status: 400, body: "no request", errLabel: "malformed"}},
		{name: "no uid", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`), want: answer{status: 400, body: "without uid", errLabel: "malformed"}},
		{name: "wrong field types", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}`), want: answer{status: 400, body: "malformed AdmissionReview", errLabel: "malformed"}},
		{name: "GET", method: http.MethodGet, want: answer{status: 405, body: "POST", errLabel: "malformed"}},
		{name: "not JSON content", ctype: "text/plain", body: review(t, podRequest(t, ownedPod("shop", "web-abc", "abc"))), want: answer{status: 415, body: "application/json", errLabel: "malformed"}},
		{name: "too big", body: huge, want: answer{status: 413, body: "over", errLabel: "malformed"}},
		{name: "another path", path: "/other", body: review(t, podRequest(t, ownedPod("shop", "web-abc", "abc"))), want: answer{status: 404}},
		{name: "a pod that does not decode", body: review(t, notPod), want: answer{status: 200, warning: true, body: "does not decode", errLabel: "malformed"}},
		{name: "a pod update", body: review(t, update), want: answer{status: 200}},
		{name: "a view not ready", decider: notReady, body: review(t, podRequest(t, ownedPod("shop", "web-abc", "abc"))),
			want: answer{status: 200, warning: true, body: "not ready", errLabel: "lookup"}},
		{name: "a workload that never appears", body: review(t, podRequest(t, ownedPod("shop", "gone-abc", "abc"))),
			want: answer{status: 200, warning: true, body: "owner not in the resources bucket", errLabel: "timeout"}},
		{name: "a gated pod", body: review(t, podRequest(t, ownedPod("shop", "web-abc", "abc"))), want: answer{status: 200, gated: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			d := tc.decider
			if d == nil {
				d = view
			}
			s, err := webhook.New(d, webhook.Options{Budget: 300 * time.Millisecond}, logger(t), reg)
			if err != nil {
				t.Fatal(err)
			}
			method, path, ctype := cmpOr(tc.method, http.MethodPost), cmpOr(tc.path, webhook.DefaultPath), cmpOr(tc.ctype, "application/json")
			req := httptest.NewRequest(method, path, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", ctype)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tc.want.status {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body.String(), tc.want.status)
			}
			if tc.want.errLabel != "" {
				if n := testkit.LabeledValue(t, reg, "weft_puller_gate_webhook_errors_total", map[string]string{"reason": tc.want.errLabel}); n != 1 {
					t.Errorf("webhook errors{reason=%s} = %v, want 1", tc.want.errLabel, n)
				}
			}
			if rec.Code != http.StatusOK {
				if !strings.Contains(rec.Body.String(), tc.want.body) {
					t.Fatalf("error %q does not say %q", rec.Body.String(), tc.want.body)
				}
				return
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("answer is no AdmissionReview: %v", err)
			}
			r := out.Response
			if r == nil || r.UID != "req-1" || !r.Allowed {
				t.Fatalf("response %+v, want req-1 allowed", r)
			}
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
				t.Fatalf("answer is %s %s", out.APIVersion, out.Kind)
			}
			if got := len(r.Warnings) > 0; got != tc.want.warning || (got && !strings.Contains(r.Warnings[0], tc.want.body)) {
				t.Fatalf("warnings %q, want a warning %v saying %q", r.Warnings, tc.want.warning, tc.want.body)
			}
			if got := r.Patch != nil; got != tc.want.gated {
				t.Fatalf("patch %s, want a patch: %v", r.Patch, tc.want.gated)
			}
			if tc.want.gated {
				checkPatch(t, r.Patch, ownedPod("shop", "web-abc", "abc"))
				if n := testkit.CounterValue(t, reg, "weft_puller_gate_pods_gated_total"); n != 1 {
					t.Errorf("pods gated = %v, want 1", n)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkPatch applies patch to pod as the API server would and checks the
// gate, label and decision are there.
func checkPatch(t *testing.T, patch []byte, pod *corev1.Pod) {
	t.Helper()
	if !json.Valid(patch) {
		t.Fatalf("patch %s is no JSON", patch)
	}
	var ops []gate.PatchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	for _, op := range ops {
		paths[op.Path] = op.Op == "add"
	}
	for _, p := range []string{"/spec/schedulingGates", "/metadata/labels/weft.io~1gated", "/metadata/annotations"} {
		if !paths[p] {
			t.Errorf("patch %s does not add %s", patch, p)
		}
	}
}
