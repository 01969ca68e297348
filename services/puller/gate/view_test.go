package gate_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

var testTypes = gate.Types{
	Policies: "policies", Deployments: "deployments", ReplicaSets: "replicasets",
	StatefulSets: "statefulsets", DaemonSets: "daemonsets", Namespaces: "namespaces",
}

func object(apiVersion, kind, namespace, name, uid string, labels map[string]string, owner *metav1.OwnerReference) map[string]any {
	md := map[string]any{"name": name, "uid": uid}
	if namespace != "" {
		md["namespace"] = namespace
	}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		md["labels"] = l
	}
	if owner != nil {
		md["ownerReferences"] = []any{map[string]any{
			"apiVersion": owner.APIVersion, "kind": owner.Kind, "name": owner.Name, "uid": string(owner.UID), "controller": true,
		}}
	}
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}
}

func policy(t *testing.T, name string, spec v1alpha1.PrePullPolicySpec) map[string]any {
	t.Helper()
	u, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func owner(kind, name, uid string) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid)}
}

func pod(namespace string, labels map[string]string, o *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "x-", Labels: labels}}
	if o != nil {
		yes := true
		o := *o
		o.Controller = &yes
		p.OwnerReferences = []metav1.OwnerReference{o}
	}
	return p
}

func sel(l map[string]string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: l} }

func startView(t *testing.T, bus *testkit.Bus) *gate.View {
	t.Helper()
	v := gate.NewView(bus.JS, testTypes, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	testkit.Run(t, v.Run)
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := v.Decide(context.Background(), pod("none", nil, nil))
		return err
	})
	return v
}

// TestViewDecides puts policies and workloads in the resources bucket as the
// watcher writes them and checks the decision on pods of each.
func TestViewDecides(t *testing.T) {
	bus := testkit.NATS(t)
	put := func(typ string, obj map[string]any) { testkit.PutResource(t, bus.JS, "k8s", typ, obj) }
	minute := &metav1.Duration{Duration: time.Minute}
	put("policies", policy(t, "gated", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: sel(map[string]string{"prepull": "gate"})},
		Gate:      true, GateTimeout: minute,
	}))
	put("policies", policy(t, "sts-only", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindStatefulSet}, Selector: sel(map[string]string{"prepull": "sts"})},
		Gate:      true,
	}))
	put("policies", policy(t, "ungated", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Selector: sel(map[string]string{"prepull": "nogate"})},
	}))
	put("policies", policy(t, "invalid", v1alpha1.PrePullPolicySpec{ // perNode above cluster
		Workloads: v1alpha1.WorkloadSelector{Selector: sel(map[string]string{"prepull": "invalid"})},
		Limits:    v1alpha1.Limits{Cluster: 1, PerNode: 2}, Gate: true,
	}))
	put("policies", policy(t, "labelled-ns", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{NamespaceSelector: sel(map[string]string{"team": "a"}), Selector: sel(map[string]string{"prepull": "ns"})},
		Gate:      true,
	}))
	put("namespaces", object("v1", "Namespace", "", "team-a", "ns-a", map[string]string{"team": "a"}, nil))
	put("namespaces", object("v1", "Namespace", "", "team-b", "ns-b", map[string]string{"team": "b"}, nil))

	put("deployments", object("apps/v1", "Deployment", "shop", "web", "d-web", map[string]string{"prepull": "gate"}, nil))
	put("replicasets", object("apps/v1", "ReplicaSet", "shop", "web-abc", "rs-web", nil, owner("Deployment", "web", "d-web")))
	put("replicasets", object("apps/v1", "ReplicaSet", "shop", "odd-name", "rs-odd", nil, owner("Deployment", "web", "d-web")))
	put("replicasets", object("apps/v1", "ReplicaSet", "shop", "bare", "rs-bare", nil, nil))
	put("deployments", object("apps/v1", "Deployment", "other", "web", "d-other", map[string]string{"prepull": "gate"}, nil))
	put("deployments", object("apps/v1", "Deployment", "shop", "plain", "d-plain", map[string]string{"prepull": "nogate"}, nil))
	put("deployments", object("apps/v1", "Deployment", "shop", "bad", "d-bad", map[string]string{"prepull": "invalid"}, nil))
	put("statefulsets", object("apps/v1", "StatefulSet", "db", "pg", "s-pg", map[string]string{"prepull": "sts"}, nil))
	put("daemonsets", object("apps/v1", "DaemonSet", "db", "agent", "ds-agent", map[string]string{"prepull": "sts"}, nil))
	put("deployments", object("apps/v1", "Deployment", "team-a", "api", "d-a", map[string]string{"prepull": "ns"}, nil))
	put("deployments", object("apps/v1", "Deployment", "team-b", "api", "d-b", map[string]string{"prepull": "ns"}, nil))

	v := startView(t, bus)
	hash := func(h string) map[string]string { return map[string]string{"pod-template-hash": h} }
	pinned := pod("shop", nil, owner("ReplicaSet", "web-abc", "rs-web"))
	pinned.Spec.NodeName = "n1"
	web := v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web", UID: "d-web"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want gate.Decision
	}{
		{"a Deployment's pod through its ReplicaSet", pod("shop", hash("abc"), owner("ReplicaSet", "web-abc", "rs-web")),
			gate.Decision{Gated: true, Policy: "gated", Timeout: gate.Duration(time.Minute), Workload: web}},
		{"a ReplicaSet whose name is not the Deployment's", pod("shop", nil, owner("ReplicaSet", "odd-name", "rs-odd")),
			gate.Decision{Gated: true, Policy: "gated", Timeout: gate.Duration(time.Minute), Workload: web}},
		{"a ReplicaSet not in the bucket yet, by pod-template-hash", pod("shop", hash("new"), owner("ReplicaSet", "web-new", "rs-new")),
			gate.Decision{Gated: true, Policy: "gated", Timeout: gate.Duration(time.Minute), Workload: web}},
		{"a StatefulSet's pod, default timeout", pod("db", nil, owner("StatefulSet", "pg", "s-pg")),
			gate.Decision{Gated: true, Policy: "sts-only", Timeout: gate.Duration(v1alpha1.DefaultGateTimeout),
				Workload: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindStatefulSet, Name: "pg", UID: "s-pg"}}},
		{"a namespace the namespaceSelector selects", pod("team-a", hash("h"), owner("ReplicaSet", "api-h", "rs-a")),
			gate.Decision{Gated: true, Policy: "labelled-ns", Timeout: gate.Duration(v1alpha1.DefaultGateTimeout),
				Workload: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "api", UID: "d-a"}}},
		{"a namespace the namespaceSelector does not select", pod("team-b", hash("h"), owner("ReplicaSet", "api-h", "rs-b")), gate.Decision{}},
		{"a DaemonSet's pod, kind not selected", pod("db", nil, owner("DaemonSet", "agent", "ds-agent")), gate.Decision{}},
		{"a namespace not listed", pod("other", hash("abc"), owner("ReplicaSet", "web-abc", "rs-o")), gate.Decision{}},
		{"a policy without the gate", pod("shop", hash("h"), owner("ReplicaSet", "plain-h", "rs-p")), gate.Decision{}},
		{"an invalid policy", pod("shop", hash("h"), owner("ReplicaSet", "bad-h", "rs-bad")), gate.Decision{}},
		{"a ReplicaSet no Deployment owns", pod("shop", nil, owner("ReplicaSet", "bare", "rs-bare")), gate.Decision{}},
		{"a pod without owner", pod("shop", nil, nil), gate.Decision{}},
		{"a pod naming its node", pinned, gate.Decision{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := v.Decide(ctx, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("decision %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("a workload that is not in the bucket before the deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := v.Decide(ctx, pod("shop", nil, owner("ReplicaSet", "late-x", "rs-late")))
		if !errors.Is(err, gate.ErrUnknownOwner) {
			t.Fatalf("err %v, want ErrUnknownOwner", err)
		}
	})

	t.Run("a workload written while the decision waits", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		var got gate.Decision
		go func() {
			var err error
			got, err = v.Decide(ctx, pod("shop", hash("h"), owner("ReplicaSet", "late-h", "rs-late")))
			done <- err
		}()
		put("deployments", object("apps/v1", "Deployment", "shop", "late", "d-late", map[string]string{"prepull": "gate"}, nil))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !got.Gated || got.Workload.UID != "d-late" {
			t.Fatalf("decision %+v, want gated Deployment late", got)
		}
	})

	t.Run("a deleted policy gates no more", func(t *testing.T) {
		key := testkit.PutResource(t, bus.JS, "k8s", "policies", policy(t, "gated", v1alpha1.PrePullPolicySpec{
			Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: sel(map[string]string{"prepull": "gate"})},
			Gate:      true,
		}))
		testkit.DeleteResource(t, bus.JS, key)
		testkit.Eventually(t, 10*time.Second, func() error {
			d, err := v.Decide(context.Background(), pod("shop", hash("abc"), owner("ReplicaSet", "web-abc", "rs-web")))
			if err != nil || d.Gated {
				return errors.New("still gated")
			}
			return nil
		})
	})
}

// TestViewNotReady: before its first read of the bucket, the view cannot
// tell, and says so; an empty bucket is a complete read.
func TestViewNotReady(t *testing.T) {
	bus := testkit.NATS(t)
	v := gate.NewView(bus.JS, testTypes, slog.New(slog.DiscardHandler))
	if _, err := v.Decide(context.Background(), pod("shop", nil, nil)); !errors.Is(err, gate.ErrNotReady) {
		t.Fatalf("err %v, want ErrNotReady", err)
	}
	if v.Ready() {
		t.Fatal("ready before reading the bucket")
	}
	testkit.Run(t, v.Run)
	testkit.Eventually(t, 30*time.Second, func() error {
		if !v.Ready() {
			return errors.New("not ready after reading the empty bucket")
		}
		return nil
	})
	startView(t, bus)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
