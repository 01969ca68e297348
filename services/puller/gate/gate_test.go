package gate_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

func TestPatches(t *testing.T) {
	d := gate.Decision{Gated: true, Policy: "p", Timeout: gate.Duration(time.Minute),
		Workload: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web", UID: "u"}}
	note := `{"policy":"p","timeout":"1m0s","workload":{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"u"}}`
	other := corev1.PodSchedulingGate{Name: "example.com/other"}
	ours := corev1.PodSchedulingGate{Name: gate.Name}
	for _, tc := range []struct {
		name        string
		pod         corev1.Pod
		add, remove string
	}{
		{
			name: "a bare pod",
			add: `[{"op":"add","path":"/spec/schedulingGates","value":[{"name":"weft.io/images"}]},` +
				`{"op":"add","path":"/metadata/labels","value":{"weft.io/gated":"true"}},` +
				`{"op":"add","path":"/metadata/annotations","value":{"weft.io/gate":` + quote(note) + `}}]`,
			remove: `null`,
		},
		{
			name: "a pod with gates, labels and annotations",
			pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"}},
				Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{other}}},
			add: `[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"weft.io/images"}},` +
				`{"op":"add","path":"/metadata/labels/weft.io~1gated","value":"true"},` +
				`{"op":"add","path":"/metadata/annotations/weft.io~1gate","value":` + quote(note) + `}]`,
			remove: `null`,
		},
		{
			name: "a gated pod",
			pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{gate.Label: "true"}},
				Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{other, ours}}},
			add: `null`,
			remove: `[{"op":"test","path":"/spec/schedulingGates","value":[{"name":"example.com/other"},{"name":"weft.io/images"}]},` +
				`{"op":"replace","path":"/spec/schedulingGates","value":[{"name":"example.com/other"}]},` +
				`{"op":"remove","path":"/metadata/labels/weft.io~1gated"}]`,
		},
		{
			name: "a pod gated by us only",
			pod:  corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{ours}}},
			add:  `null`,
			remove: `[{"op":"test","path":"/spec/schedulingGates","value":[{"name":"weft.io/images"}]},` +
				`{"op":"replace","path":"/spec/schedulingGates","value":[]}]`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add, err := gate.AddPatch(&tc.pod, d)
			if err != nil {
				t.Fatal(err)
			}
			if got := mustJSON(t, add); got != tc.add {
				t.Errorf("add patch\n%s\nwant\n%s", got, tc.add)
			}
			if got := mustJSON(t, gate.RemovePatch(&tc.pod)); got != tc.remove {
				t.Errorf("remove patch\n%s\nwant\n%s", got, tc.remove)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		note *string
		ok   bool
	}{
		{"missing", nil, false},
		{"not JSON", ptr("{"), false},
		{"no timeout", ptr(`{"policy":"p","workload":{"kind":"Deployment","name":"w"}}`), false},
		{"bad timeout", ptr(`{"policy":"p","timeout":"soon","workload":{"kind":"Deployment","name":"w"}}`), false},
		{"no workload", ptr(`{"policy":"p","timeout":"1m"}`), false},
		{"whole", ptr(`{"policy":"p","timeout":"1m","workload":{"kind":"Deployment","name":"w"}}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			if tc.note != nil {
				pod.Annotations = map[string]string{gate.Annotation: *tc.note}
			}
			d, err := gate.Parse(pod)
			if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, gate.ErrNoDecision) {
				t.Fatalf("Parse: %+v, %v", d, err)
			}
			if tc.ok && (!d.Gated || d.Timeout != gate.Duration(time.Minute) || d.Workload.Name != "w") {
				t.Fatalf("Parse: %+v", d)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
