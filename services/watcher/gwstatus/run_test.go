package gwstatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher/gwstatus"
	"github.com/weftio/weft/services/watcher/statuslease"
)

func TestWithAddresses(t *testing.T) {
	gw := func(programmed string) gwstatus.GatewayStatus {
		return gwstatus.GatewayStatus{Name: "gw", Conditions: []gwstatus.Condition{
			{Type: "Accepted", Status: "True", Reason: "Accepted"},
			{Type: "Programmed", Status: programmed, Reason: map[string]string{"True": "Programmed", "False": "Invalid"}[programmed]}}}
	}
	ip := []gwstatus.Address{{Type: gwstatus.AddressIP, Value: "192.0.2.1"}}
	cases := []struct {
		name       string
		programmed string
		addrs      []gwstatus.Address
		want       string // Programmed status/reason
	}{
		{"programmed with an address", "True", ip, "True/Programmed"},
		{"programmed without address", "True", nil, "False/AddressNotAssigned"},
		{"not programmed stays so", "False", ip, "False/Invalid"},
		{"not programmed, no address: its own reason", "False", nil, "False/Invalid"},
	}
	for _, tc := range cases {
		st := &gwstatus.Status{Gateways: []gwstatus.GatewayStatus{gw(tc.programmed)}}
		out := gwstatus.WithAddresses(st, tc.addrs)
		g := out.Gateways[0]
		if got := g.Conditions[1].Status + "/" + g.Conditions[1].Reason; got != tc.want {
			t.Errorf("%s: Programmed %s, want %s", tc.name, got, tc.want)
		}
		if g.Addresses == nil || len(g.Addresses) != len(tc.addrs) {
			t.Errorf("%s: addresses %#v, want %v (not nil)", tc.name, g.Addresses, tc.addrs)
		}
		if st.Gateways[0].Conditions[1].Status != tc.programmed || st.Gateways[0].Addresses != nil {
			t.Errorf("%s: the input was changed: %+v", tc.name, st.Gateways[0])
		}
	}
}

// TestRunServedBundle runs the writer of a target on embedded NATS and a
// real API server: it writes the status of the last accepted bundle, with
// the addresses of a LoadBalancer Service (a Gateway without any is not
// programmed), follows a new address, counts a bundle without a status
// file as invalid and writes nothing from it, and writes the pinned bundle
// while a rollback pins the target.
func TestRunServedBundle(t *testing.T) {
	k := kubetest.Start(t)
	k.InstallCRDs(t, "testdata/crds")
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(k.Config)
	cs := kubernetes.NewForConfigOrDie(k.Config)
	for _, ns := range []string{"infra", "lb"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := cs.CoreV1().Services("lb").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "haproxy"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []map[string]any{
		{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": map[string]any{"name": "weft"},
			"spec": map[string]any{"controllerName": controller}},
		{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": map[string]any{"name": "gw", "namespace": "infra"},
			"spec": map[string]any{"gatewayClassName": "weft", "listeners": []any{map[string]any{"name": "http", "protocol": "HTTP", "port": int64(80)}}}},
	} {
		u := &unstructured.Unstructured{Object: obj}
		gvr := gwstatus.GatewayClasses
		if u.GetKind() == "Gateway" {
			gvr = gwstatus.Gateways
		}
		if _, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	bus := testkit.NATS(t)
	status, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := bus.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	bundles := msg.NewBundleStore(bus.JS)
	// bundle stores a bundle whose GatewayClass is Accepted with reason
	// (none: a bundle without status file) and returns its hash.
	bundle := func(reason string) string {
		t.Helper()
		files := []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Name: "haproxy.cfg", Content: []byte("global\n# " + reason + "\n")}}
		if reason != "" {
			accepted := "True"
			if reason != "Accepted" {
				accepted = "False"
			}
			st := gwstatus.Status{
				GatewayClasses: []gwstatus.ClassStatus{{Name: "weft", Conditions: []gwstatus.Condition{{Type: "Accepted", Status: accepted, Reason: reason}}}},
				Gateways: []gwstatus.GatewayStatus{{Namespace: "infra", Name: "gw", Generation: 1, Conditions: []gwstatus.Condition{
					{Type: "Accepted", Status: "True", Reason: "Accepted"}, {Type: "Programmed", Status: "True", Reason: "Programmed"}}}},
				HTTPRoutes: []gwstatus.RouteStatus{},
			}
			data, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, msg.BundleFile{Path: gwstatus.StatusFile, Kind: msg.FileFile, Name: "gateway-status.json", Content: data})
		}
		b, err := msg.NewBundle("gateway", "", "haproxy.cfg", files)
		if err != nil {
			t.Fatal(err)
		}
		if err := bundles.PutBundle(ctx, "", b); err != nil {
			t.Fatal(err)
		}
		return b.Hash
	}
	accept := func(hash string) {
		t.Helper()
		data, err := msg.Encode(msg.ValidationStatus{Target: "gateway", BundleHash: hash, OK: true, LastGood: hash, At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := status.Put(ctx, msg.ValidationStatusKey("gateway"), data); err != nil {
			t.Fatal(err)
		}
	}

	env := testkit.NewEnv(t, bus, "w1")
	reg := env.Registry
	m, err := gwstatus.NewMetrics(reg, "watcher")
	if err != nil {
		t.Fatal(err)
	}
	o := gwstatus.Options{
		Target: "gateway",
		Spec: config.GatewayStatus{ControllerName: controller, Resync: config.Duration(time.Hour),
			From: &config.IngressStatusFrom{Service: "lb/haproxy"}},
		Client: dyn, Kube: cs, Status: &firstWatchEnds{KeyValue: status}, Bundles: bundles,
		Leases: statuslease.Leases{KV: leases, Pub: bus.JS}, Owner: "w1",
		Log: env.Log, Metrics: m,
	}
	testkit.Run(t, func(ctx context.Context) error { return gwstatus.Run(ctx, o) })

	// wait waits for the class's Accepted reason, the Gateway's
	// Programmed status/reason and its addresses.
	wait := func(classReason, programmed, addrs string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			class, err := dyn.Resource(gwstatus.GatewayClasses).Get(ctx, "weft", metav1.GetOptions{})
			if err != nil {
				return err
			}
			gw, err := dyn.Resource(gwstatus.Gateways).Namespace("infra").Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cc, _, _ := unstructured.NestedSlice(class.Object, "status", "conditions")
			gc, _, _ := unstructured.NestedSlice(gw.Object, "status", "conditions")
			ga, _, _ := unstructured.NestedSlice(gw.Object, "status", "addresses")
			have := fmt.Sprintf("%s %s %v", reasonOf(cc, "Accepted"), reasonOf(gc, "Programmed"), ga)
			if want := classReason + " " + programmed + " " + addrs; have != want {
				return fmt.Errorf("status %q, want %q", have, want)
			}
			return nil
		})
	}
	a := bundle("Accepted")
	accept(a)
	wait("True/Accepted", "False/AddressNotAssigned", "[]")

	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}
	if _, err := cs.CoreV1().Services("lb").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("True/Accepted", "True/Programmed", "[map[type:IPAddress value:203.0.113.5]]")

	accept(bundle(""))
	testkit.Eventually(t, 30*time.Second, func() error {
		if n := testkit.LabeledValue(t, reg, "weft_watcher_gateway_status_writes_total", map[string]string{"result": gwstatus.ResultInvalid}); n != 1 {
			return fmt.Errorf("%v invalid bundles counted, want 1", n)
		}
		return nil
	})
	wait("True/Accepted", "True/Programmed", "[map[type:IPAddress value:203.0.113.5]]")

	pinned := bundle("Pinned")
	data, err := msg.Encode(msg.Pin{Target: "gateway", Version: 1, BundleHash: pinned, Since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := status.Put(ctx, msg.PinKey("gateway"), data); err != nil {
		t.Fatal(err)
	}
	wait("False/Pinned", "True/Programmed", "[map[type:IPAddress value:203.0.113.5]]")
}

// firstWatchEnds is a real bucket whose first watch ends at once, as one
// does when its NATS node is lost: the runner must watch the same keys
// again.
type firstWatchEnds struct {
	jetstream.KeyValue
	watches atomic.Int32
}

func (f *firstWatchEnds) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := f.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err == nil && f.watches.Add(1) == 1 {
		_ = w.Stop()
	}
	return w, err
}

func reasonOf(conds []any, typ string) string {
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return fmt.Sprintf("%v/%v", m["status"], m["reason"])
		}
	}
	return "none"
}
