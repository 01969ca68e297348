package watcher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher"
	"github.com/weftio/weft/services/watcher/ingstatus"
)

const writesMetric = "weft_watcher_ingress_status_writes_total"

// TestIngressStatusFromService runs two watcher replicas on one NATS with
// a target whose ingress_status takes its addresses from a LoadBalancer
// Service: the two Ingresses of the class get the Service's addresses and
// follow their changes (and a status changed behind weft's back is set
// back), the Ingresses of another class and without a class are never
// touched, an Ingress that moves to another class has its status cleared,
// only the lease holder writes, the other replica takes over when the
// holder stops, and a Service that goes missing is reported without
// touching any status.
func TestIngressStatusFromService(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	cs := k.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "weft-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services("weft-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "weft-haproxy"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "haproxy"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setLB := func(addrs ...corev1.LoadBalancerIngress) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, func() error {
			s, err := cs.CoreV1().Services("weft-system").Get(ctx, svc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Status.LoadBalancer.Ingress = addrs
			_, err = cs.CoreV1().Services("weft-system").UpdateStatus(ctx, s, metav1.UpdateOptions{FieldManager: "cloud-controller"})
			return err
		})
	}
	setLB(corev1.LoadBalancerIngress{IP: "203.0.113.10"})

	createIngress(t, cs, "a", "weft", nil)
	createIngress(t, cs, "b", "", map[string]string{ingstatus.LegacyClassAnnotation: "weft"})
	other := createIngress(t, cs, "other", "nginx", nil)
	createIngress(t, cs, "plain", "", nil)
	// another controller's status on its own Ingress
	other.Status.LoadBalancer.Ingress = []netv1.IngressLoadBalancerIngress{{IP: "198.51.100.1"}}
	if _, err := cs.NetworkingV1().Ingresses("default").UpdateStatus(ctx, other, metav1.UpdateOptions{FieldManager: "nginx"}); err != nil {
		t.Fatal(err)
	}

	cfg, err := config.Parse(fmt.Appendf(nil, `
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress}
targets:
  edge:
    haproxy_config: {template: "global\n"}
    deploy: {driver: files, dest: out}
    ingress_status:
      class: weft
      resync: 1h
      from: {service: weft-system/weft-haproxy}
`, k.Kubeconfig), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bus := testkit.NATS(t)
	envs := []*testkit.Env{testkit.NewEnv(t, bus, "w1"), testkit.NewEnv(t, bus, "w2")}
	stops := make([]func(), len(envs))
	for i, env := range envs {
		stops[i] = testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	}
	writes := func(i int) float64 { return testkit.CounterValue(t, envs[i].Registry, writesMetric) }

	lb1 := []netv1.IngressLoadBalancerIngress{{IP: "203.0.113.10"}}
	waitStatus(t, cs, "a", lb1)
	waitStatus(t, cs, "b", lb1)
	leases, err := bus.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := leases.Get(ctx, msg.IngressStatusLeaseKey("edge"))
	if err != nil {
		t.Fatal(err)
	}
	holder := 0
	if string(lease.Value()) == "w2" {
		holder = 1
	}
	standby := 1 - holder
	testkit.Eventually(t, 10*time.Second, func() error {
		if w := writes(holder); w != 2 {
			return fmt.Errorf("the holder counted %v writes, want 2", w)
		}
		return nil
	})

	t.Run("the status follows the Service's addresses", func(t *testing.T) {
		setLB(corev1.LoadBalancerIngress{IP: "203.0.113.20"}, corev1.LoadBalancerIngress{Hostname: "lb.example.com"})
		lb2 := []netv1.IngressLoadBalancerIngress{{IP: "203.0.113.20"}, {Hostname: "lb.example.com"}}
		waitStatus(t, cs, "a", lb2)
		waitStatus(t, cs, "b", lb2)
		// a status changed behind weft's back is set back
		testkit.Eventually(t, 10*time.Second, func() error {
			a, err := cs.NetworkingV1().Ingresses("default").Get(ctx, "a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			a.Status.LoadBalancer.Ingress = []netv1.IngressLoadBalancerIngress{{IP: "192.0.2.66"}}
			_, err = cs.NetworkingV1().Ingresses("default").UpdateStatus(ctx, a, metav1.UpdateOptions{FieldManager: "intruder"})
			return err
		})
		waitStatus(t, cs, "a", lb2)
	})

	t.Run("an Ingress that leaves the class is cleared", func(t *testing.T) {
		testkit.Eventually(t, 10*time.Second, func() error {
			b, err := cs.NetworkingV1().Ingresses("default").Get(ctx, "b", metav1.GetOptions{})
			if err != nil {
				return err
			}
			b.Spec.IngressClassName = ptr("nginx")
			_, err = cs.NetworkingV1().Ingresses("default").Update(ctx, b, metav1.UpdateOptions{})
			return err
		})
		waitStatus(t, cs, "b", nil)
		testkit.Eventually(t, 10*time.Second, func() error {
			if n := testkit.LabeledValue(t, envs[holder].Registry, writesMetric, map[string]string{"result": ingstatus.ResultCleared}); n != 1 {
				return fmt.Errorf("%v cleared writes, want 1", n)
			}
			return nil
		})
	})

	t.Run("other classes and classless Ingresses are untouched", func(t *testing.T) {
		waitStatus(t, cs, "other", []netv1.IngressLoadBalancerIngress{{IP: "198.51.100.1"}})
		waitStatus(t, cs, "plain", nil)
		for _, name := range []string{"other", "plain"} {
			ing, err := cs.NetworkingV1().Ingresses("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ingstatus.WrittenBy(ing, ingstatus.FieldManager("edge")) {
				t.Errorf("ingress %s was written by weft", name)
			}
		}
	})

	t.Run("only the lease holder writes", func(t *testing.T) {
		if w := writes(standby); w != 0 {
			t.Errorf("the replica without the lease counted %v writes", w)
		}
	})

	t.Run("the other replica takes over when the holder stops", func(t *testing.T) {
		before := writes(holder)
		stops[holder]()
		setLB(corev1.LoadBalancerIngress{IP: "203.0.113.30"})
		lb3 := []netv1.IngressLoadBalancerIngress{{IP: "203.0.113.30"}}
		waitStatus(t, cs, "a", lb3)
		waitStatus(t, cs, "b", nil)
		waitStatus(t, cs, "other", []netv1.IngressLoadBalancerIngress{{IP: "198.51.100.1"}})
		testkit.Eventually(t, 10*time.Second, func() error {
			if w := writes(standby); w != 1 {
				return fmt.Errorf("the new holder counted %v writes, want 1 (a only)", w)
			}
			return nil
		})
		if w := writes(holder); w != before {
			t.Errorf("the stopped replica wrote: %v writes, had %v", w, before)
		}
	})

	t.Run("a missing Service is reported and changes nothing", func(t *testing.T) {
		if err := cs.CoreV1().Services("weft-system").Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, func() error {
			if !strings.Contains(envs[standby].Logs.String(), "Service weft-system/weft-haproxy not found") {
				return fmt.Errorf("no error logged")
			}
			return nil
		})
		waitStatus(t, cs, "a", []netv1.IngressLoadBalancerIngress{{IP: "203.0.113.30"}})
	})
}

func ptr[T any](v T) *T { return &v }

// createIngress creates Ingress name in default of class (none: "").
func createIngress(t *testing.T, cs kubernetes.Interface, name, class string, annotations map[string]string) *netv1.Ingress {
	t.Helper()
	ing := &netv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: netv1.IngressSpec{DefaultBackend: &netv1.IngressBackend{
			Service: &netv1.IngressServiceBackend{Name: "app", Port: netv1.ServiceBackendPort{Number: 80}}}},
	}
	if class != "" {
		ing.Spec.IngressClassName = ptr(class)
	}
	out, err := cs.NetworkingV1().Ingresses("default").Create(context.Background(), ing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitStatus waits until Ingress name's status shows want.
func waitStatus(t *testing.T, cs kubernetes.Interface, name string, want []netv1.IngressLoadBalancerIngress) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() error {
		ing, err := cs.NetworkingV1().Ingresses("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if have := ing.Status.LoadBalancer.Ingress; !ingstatus.Equal(have, want) {
			return fmt.Errorf("ingress %s: status %+v, want %+v", name, have, want)
		}
		return nil
	})
}

// TestIngressStatusByController: the status writer selects the Ingresses
// the ingress library serves: those of an IngressClass of the target's
// controller (not only the class named by ingress_class), and those without
// a class while one of the target's classes is the default; a class that
// stops being the default has the classless Ingresses' status cleared.
func TestIngressStatusByController(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	cs := k.Clientset
	class := func(name, controller string) {
		c := &netv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.IngressClassSpec{Controller: controller}}
		if _, err := cs.NetworkingV1().IngressClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setDefault := func(name string, isDefault bool) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, func() error {
			c, err := cs.NetworkingV1().IngressClasses().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c.Annotations = nil
			if isDefault {
				c.Annotations = map[string]string{ingstatus.DefaultClassAnnotation: "true"}
			}
			_, err = cs.NetworkingV1().IngressClasses().Update(ctx, c, metav1.UpdateOptions{})
			return err
		})
	}
	class("ctl-public", "example.com/weft")
	class("ctl-nginx", "k8s.io/ingress-nginx")
	createIngress(t, cs, "ctl-a", "ctl-public", nil)
	// created while no class is the default: the API server leaves it
	// without class (it gives the default class to new Ingresses)
	createIngress(t, cs, "ctl-b", "", nil)
	createIngress(t, cs, "ctl-c", "ctl-nginx", nil)
	setDefault("ctl-public", true)

	cfg, err := config.Parse(fmt.Appendf(nil, `
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress}
targets:
  edge:
    haproxy_config: {template: "global\n"}
    deploy: {driver: files, dest: out}
    library_options: {controller: example.com/weft}
    ingress_status:
      resync: 1h
      from: {addresses: [192.0.2.9]}
`, k.Kubeconfig), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bus := testkit.NATS(t)
	env := testkit.NewEnv(t, bus, "w")
	testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })

	want := []netv1.IngressLoadBalancerIngress{{IP: "192.0.2.9"}}
	waitStatus(t, cs, "ctl-a", want)
	waitStatus(t, cs, "ctl-b", want)
	waitStatus(t, cs, "ctl-c", nil)

	setDefault("ctl-public", false)
	waitStatus(t, cs, "ctl-b", nil)
	waitStatus(t, cs, "ctl-a", want)
	ing, err := cs.NetworkingV1().Ingresses("default").Get(ctx, "ctl-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ingstatus.WrittenBy(ing, ingstatus.FieldManager("edge")) {
		t.Errorf("the Ingress of another controller's class was written by weft")
	}
}
