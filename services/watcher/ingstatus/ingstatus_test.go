package ingstatus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher/ingstatus"
	"github.com/weftio/weft/services/watcher/statuslease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

func ptr[T any](v T) *T { return &v }

func TestClaims(t *testing.T) {
	ing := func(class string, annotation string) *netv1.Ingress {
		i := &netv1.Ingress{}
		if class != "" {
			i.Spec.IngressClassName = ptr(class)
		}
		if annotation != "" {
			i.Annotations = map[string]string{ingstatus.LegacyClassAnnotation: annotation}
		}
		return i
	}
	class := func(name, controller string, isDefault bool) *netv1.IngressClass {
		c := &netv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.IngressClassSpec{Controller: controller}}
		if isDefault {
			c.Annotations = map[string]string{ingstatus.DefaultClassAnnotation: "true"}
		}
		return c
	}
	weft := config.IngressStatus{Class: "weft", Controller: "weft.io/ingress"}
	dflt := config.IngressStatus{Class: "weft", Controller: "weft.io/ingress", DefaultClass: true}
	none := []*netv1.IngressClass(nil)
	classes := []*netv1.IngressClass{
		class("weft", "example.com/other", false), // named by ingress_class: ours whatever its controller
		class("public", "weft.io/ingress", false),
		class("nginx", "k8s.io/ingress-nginx", false),
	}
	ourDefault := append(slices.Clone(classes), class("internal", "weft.io/ingress", true))
	theirDefault := append(slices.Clone(classes), class("nginx-default", "k8s.io/ingress-nginx", true))
	namedDefault := []*netv1.IngressClass{class("weft", "example.com/other", true)}
	cases := []struct {
		name    string
		spec    config.IngressStatus
		classes []*netv1.IngressClass
		ing     *netv1.Ingress
		want    bool
	}{
		{"class named", weft, none, ing("weft", ""), true},
		{"another class", weft, none, ing("nginx", ""), false},
		{"ingressClassName wins over the annotation", weft, none, ing("nginx", "weft"), false},
		{"annotation", weft, none, ing("", "weft"), true},
		{"another annotation", dflt, none, ing("", "nginx"), false},
		{"no class, not the default", weft, none, ing("", ""), false},
		{"no class, default_class", dflt, none, ing("", ""), true},
		{"another class, default claimed", dflt, none, ing("nginx", ""), false},
		{"a class of the controller", weft, classes, ing("public", ""), true},
		{"a class of the controller by annotation", weft, classes, ing("", "public"), true},
		{"a class of another controller", weft, classes, ing("nginx", ""), false},
		{"a class that does not exist", weft, classes, ing("missing", ""), false},
		{"the named class, another controller", weft, classes, ing("weft", ""), true},
		{"no class, no default", weft, classes, ing("", ""), false},
		{"no class, a class of the controller is default", weft, ourDefault, ing("", ""), true},
		{"no class, the named class is default", weft, namedDefault, ing("", ""), true},
		{"no class, another controller's class is default", weft, theirDefault, ing("", ""), false},
		{"controller unset: by name only", config.IngressStatus{Class: "weft"}, classes, ing("public", ""), false},
	}
	for _, tc := range cases {
		if got := ingstatus.Claims(tc.spec, tc.classes, tc.ing); got != tc.want {
			t.Errorf("%s: Claims = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFromPods(t *testing.T) {
	pod := func(phase corev1.PodPhase, host, ip string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, HostIP: host, PodIP: ip}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return p
	}
	pods := []*corev1.Pod{
		pod(corev1.PodRunning, "10.0.0.2", "10.1.0.5", false),
		pod(corev1.PodRunning, "10.0.0.1", "10.1.0.4", false),
		pod(corev1.PodRunning, "10.0.0.2", "10.1.0.6", false), // same node
		pod(corev1.PodPending, "10.0.0.3", "", false),
		pod(corev1.PodRunning, "10.0.0.4", "10.1.0.7", true),
		pod(corev1.PodRunning, "", "", false),
	}
	cases := []struct{ address, want string }{
		{config.PodHostIP, "10.0.0.1,10.0.0.2"},
		{config.PodPodIP, "10.1.0.4,10.1.0.5,10.1.0.6"},
	}
	for _, tc := range cases {
		var got []string
		for _, a := range ingstatus.FromPods(pods, tc.address) {
			got = append(got, a.IP+a.Hostname)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%s: %v, want %s", tc.address, got, tc.want)
		}
	}
}

// TestPodsAndRefusedWrites takes the addresses from instance Pods' host
// IPs, as a user that may read Ingresses and Pods but not yet write
// Ingress statuses: every refused write is counted and logged, and retried
// until the permission is granted; then Pods coming and going change the
// status. The lease is held on a real nats-server as the watcher's user.
func TestPodsAndRefusedWrites(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	cs := k.Clientset
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress-status"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses", "ingressclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress-status"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "writer"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writer, err := kubernetes.NewForConfig(k.User(t, "writer"))
	if err != nil {
		t.Fatal(err)
	}
	for i, host := range []string{"10.0.0.2", "10.0.0.1"} {
		runPod(t, cs, fmt.Sprintf("haproxy-%d", i), host)
	}
	if _, err := cs.NetworkingV1().Ingresses("default").Create(ctx, &netv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: netv1.IngressSpec{IngressClassName: ptr("weft"), DefaultBackend: &netv1.IngressBackend{
			Service: &netv1.IngressServiceBackend{Name: "app", Port: netv1.ServiceBackendPort{Number: 80}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// the lease on a real nats-server, as the watcher's NATS user
	srv := testkit.NATSWithUsers(t, "")
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := msg.Provision(pctx, srv.Connect(t, msg.RoleProvisioner).JS, 1); err != nil {
		t.Fatal(err)
	}
	nc := srv.Connect(t, msg.RoleWatcher)
	env := testkit.NewEnv(t, nc.Bus, "w1")
	m, err := ingstatus.NewMetrics(env.Registry, "watcher")
	if err != nil {
		t.Fatal(err)
	}
	leases, err := nc.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	o := ingstatus.Options{
		Target: "edge", Client: writer, Owner: "w1", Log: env.Log, Metrics: m,
		Leases: statuslease.Leases{KV: leases, Pub: nc.JS},
		Spec: config.IngressStatus{Class: "weft", Resync: config.Duration(time.Hour),
			From: config.IngressStatusFrom{Pods: &config.IngressStatusPods{Namespace: "default", Selector: "app=haproxy", Address: config.PodHostIP}}},
	}
	testkit.Run(t, func(ctx context.Context) error { return ingstatus.Run(ctx, o) })

	failed := func() float64 { return result(t, env.Registry, ingstatus.ResultFailed) }
	testkit.Eventually(t, 30*time.Second, func() error {
		if failed() < 2 {
			return fmt.Errorf("%v failed writes, want a refusal retried", failed())
		}
		return nil
	})
	if !strings.Contains(env.Logs.String(), "writing the ingress status failed; retrying") || !strings.Contains(env.Logs.String(), "forbidden") {
		t.Errorf("the refusal is not logged:\n%s", env.Logs.String())
	}
	if ing, _ := cs.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{}); len(ing.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("status written without the permission: %+v", ing.Status)
	}

	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses/status"}, Verbs: []string{"update"}})
	if _, err := cs.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAddrs(t, cs, "10.0.0.1,10.0.0.2")
	// A write is counted just after the API server took it.
	testkit.Eventually(t, 10*time.Second, func() error {
		if w := result(t, env.Registry, ingstatus.ResultWritten); w != 1 {
			return fmt.Errorf("%v writes, want 1", w)
		}
		return nil
	})

	runPod(t, cs, "haproxy-2", "10.0.0.3")
	waitAddrs(t, cs, "10.0.0.1,10.0.0.2,10.0.0.3")
	if err := cs.CoreV1().Pods("default").Delete(ctx, "haproxy-0", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitAddrs(t, cs, "10.0.0.1,10.0.0.3")
	if e, err := leases.Get(ctx, msg.IngressStatusLeaseKey("edge")); err != nil || string(e.Value()) != "w1" {
		t.Errorf("lease %s: %v", msg.IngressStatusLeaseKey("edge"), err)
	}
	select {
	case err := <-nc.Errs:
		t.Errorf("the watcher's NATS user was refused: %v", err)
	default:
	}
}

func result(t *testing.T, reg prometheus.Gatherer, r string) float64 {
	return testkit.LabeledValue(t, reg, "weft_watcher_ingress_status_writes_total", map[string]string{"result": r})
}

// runPod creates a Pod labeled app=haproxy and marks it Running on host.
func runPod(t *testing.T, cs kubernetes.Interface, name, host string) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "haproxy"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "haproxy", Image: "haproxy"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: host, HostIPs: []corev1.HostIP{{IP: host}}, PodIP: "10.1.0.1", PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestTakeoverAfterHolderDies: the holder's NATS connection goes with it,
// so its lease is neither renewed nor released; the other replica takes
// the lease once its TTL is over, and sets back a status changed since.
func TestTakeoverAfterHolderDies(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	cs := k.Clientset
	if _, err := cs.NetworkingV1().Ingresses("default").Create(ctx, &netv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: netv1.IngressSpec{IngressClassName: ptr("weft"), DefaultBackend: &netv1.IngressBackend{
			Service: &netv1.IngressServiceBackend{Name: "app", Port: netv1.ServiceBackendPort{Number: 80}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bus := testkit.NATS(t)
	spec := config.IngressStatus{Class: "weft", Resync: config.Duration(time.Hour),
		From: config.IngressStatusFrom{Addresses: []string{"203.0.113.1", "lb.example.com"}}}
	type replica struct {
		env  *testkit.Env
		nc   *nats.Conn
		stop func()
	}
	start := func(name string) *replica {
		nc, err := nats.Connect(bus.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		leases, err := js.KeyValue(ctx, msg.BucketLeases)
		if err != nil {
			t.Fatal(err)
		}
		env := testkit.NewEnv(t, bus, name)
		m, err := ingstatus.NewMetrics(env.Registry, "watcher")
		if err != nil {
			t.Fatal(err)
		}
		o := ingstatus.Options{Target: "edge", Spec: spec, Client: cs, Owner: name, Log: env.Log, Metrics: m,
			Leases: statuslease.Leases{KV: leases, Pub: js}}
		return &replica{env: env, nc: nc, stop: testkit.Run(t, func(ctx context.Context) error { return ingstatus.Run(ctx, o) })}
	}
	writes := func(r *replica) float64 { return result(t, r.env.Registry, ingstatus.ResultWritten) }
	first := start("r1")
	waitAddrs(t, cs, "203.0.113.1,lb.example.com")
	second := start("r2")
	testkit.Eventually(t, 10*time.Second, func() error {
		if w := writes(first); w != 1 {
			return fmt.Errorf("r1 counted %v writes, want 1", w)
		}
		return nil
	})

	first.nc.Close() // dies: no renewal, no release
	first.stop()
	testkit.Eventually(t, 10*time.Second, func() error {
		ing, err := cs.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ing.Status.LoadBalancer.Ingress = []netv1.IngressLoadBalancerIngress{{IP: "192.0.2.66"}}
		_, err = cs.NetworkingV1().Ingresses("default").UpdateStatus(ctx, ing, metav1.UpdateOptions{FieldManager: "intruder"})
		return err
	})
	waitAddrs(t, cs, "203.0.113.1,lb.example.com")
	// A write is counted just after the API server took it.
	testkit.Eventually(t, 10*time.Second, func() error {
		if w := writes(second); w != 1 {
			return fmt.Errorf("r2 counted %v writes, want 1", w)
		}
		return nil
	})
	if w := writes(first); w != 1 {
		t.Errorf("r1 counted %v writes after it died, want 1", w)
	}
}

// waitAddrs waits until Ingress web's status lists addrs (comma-separated).
func waitAddrs(t *testing.T, cs kubernetes.Interface, addrs string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() error {
		ing, err := cs.NetworkingV1().Ingresses("default").Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var got []string
		for _, a := range ing.Status.LoadBalancer.Ingress {
			got = append(got, a.IP+a.Hostname)
		}
		if strings.Join(got, ",") != addrs {
			return fmt.Errorf("status %v, want %s", got, addrs)
		}
		return nil
	})
}
