package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher"
)

// podsTimeout bounds every wait of TestPodsAreInstancesInKubernetes; it only
// matters when something is wrong.
const podsTimeout = 45 * time.Second

// podsConfig is the configuration of TestPodsAreInstancesInKubernetes: Pods
// of namespace lb from the API server, and a target delivered to the
// Dataplane API of every ready Pod labelled app=haproxy. generation is
// written into the HAProxy configuration, so that a change of it is a new
// template.
func podsConfig(t *testing.T, kubeconfig, base, user, password, port string, generation int) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  pods: {api_version: v1, kind: Pod, namespace: lb}
targets:
  edge:
    base: %s
    validate: {kinds: [template, haproxy]}
    deploy:
      driver: dataplane
      dataplane: {user: %s, password: %s}
      pods: {type: pods, label_selector: "app=haproxy", port: %s}
    haproxy_config:
      template: |
        global
            maxconn 100

        defaults
            mode http
            timeout connect 5s
            timeout client 5s
            timeout server 5s

        frontend www
            bind 127.0.0.1:18480
            http-response set-header X-Generation %d
            default_backend app

        backend app
            server app1 127.0.0.1:18481
`, kubeconfig, base, user, password, port, generation)
	cfg, err := config.Parse([]byte(y), base)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// podKit drives Pods through the API server as a kubelet would.
type podKit struct {
	t    *testing.T
	pods typedcorev1.PodInterface // of namespace lb
}

func newPodKit(t *testing.T, cs kubernetes.Interface) *podKit {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lb"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &podKit{t: t, pods: cs.CoreV1().Pods("lb")}
}

// create makes a Pod bound to a node, as the scheduler would leave it:
// Pending, without an address. Being bound, it is deleted gracefully (it
// stays, terminating, until its kubelet would confirm).
func (k *podKit) create(name, app string) {
	k.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName:   "node-1",
			Containers: []corev1.Container{{Name: "haproxy", Image: "haproxytech/haproxy-debian:2.6"}},
		},
	}
	if _, err := k.pods.Create(k.t.Context(), pod, metav1.CreateOptions{}); err != nil {
		k.t.Fatalf("create pod %s: %v", name, err)
	}
}

// run sets a Pod's status as its kubelet would once its container runs:
// phase Running with address ip and a Ready condition. With onlyIPs the
// address is given in status.podIPs alone; the API server fills podIP from
// it.
func (k *podKit) run(name, ip string, ready, onlyIPs bool) {
	k.t.Helper()
	pod, err := k.pods.Get(k.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatalf("get pod %s: %v", name, err)
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
		},
	}
	if !onlyIPs {
		pod.Status.PodIP = ip
	}
	got, err := k.pods.UpdateStatus(k.t.Context(), pod, metav1.UpdateOptions{})
	if err != nil {
		k.t.Fatalf("update the status of pod %s: %v", name, err)
	}
	if got.Status.PodIP != ip {
		k.t.Fatalf("pod %s has podIP %q after its status update, want %s", name, got.Status.PodIP, ip)
	}
}

// podsStack is weft in-process on one NATS server, restartable on a new
// configuration as `weft up` restarts its services.
type podsStack struct {
	t     *testing.T
	bus   *testkit.Bus
	env   *testkit.Env
	stops []func()
}

// start runs the named services (all when none is named) on cfg; a start
// after stop is a new weft process, with a fresh environment.
func (s *podsStack) start(cfg *config.Config, names ...string) {
	s.t.Helper()
	if s.env == nil {
		s.env = testkit.NewEnv(s.t, s.bus, "pods")
	}
	for _, sv := range Services {
		if len(names) == 0 || slices.Contains(names, sv.Name) {
			s.stops = append(s.stops, testkit.Run(s.t, func(ctx context.Context) error { return sv.Run(ctx, s.env.Env, cfg) }))
		}
	}
}

// stop stops every service started.
func (s *podsStack) stop() {
	for _, f := range s.stops {
		f()
	}
	s.stops, s.env = nil, nil
}

// deploys returns the deploy statuses of target edge by instance, as
// `weft status` reports them.
func (s *podsStack) deploys() map[string]msg.DeployStatus {
	s.t.Helper()
	kv, err := s.bus.JS.KeyValue(s.t.Context(), msg.BucketStatus)
	if err != nil {
		s.t.Fatal(err)
	}
	rep, err := msg.ReadStatus(s.t.Context(), kv)
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]msg.DeployStatus{}
	for _, tr := range rep.Targets {
		if tr.Target == "edge" {
			for _, d := range tr.Deploys {
				out[d.Instance] = d
			}
		}
	}
	return out
}

// accepted returns the version and the HAProxy configuration of the last
// bundle validation accepted for edge.
func (s *podsStack) accepted() (uint64, string, error) {
	kv, err := s.bus.JS.KeyValue(s.t.Context(), msg.BucketStatus)
	if err != nil {
		return 0, "", err
	}
	var vs msg.ValidationStatus
	if _, err := msg.LoadStatus(s.t.Context(), kv, msg.ValidationStatusKey("edge"), &vs); err != nil {
		return 0, "", fmt.Errorf("validation status: %w", err)
	}
	if vs.LastGood == "" {
		return 0, "", errors.New("no accepted bundle yet")
	}
	b, err := msg.NewBundleStore(s.bus.JS).LoadBundle(s.t.Context(), vs.LastGood)
	if err != nil {
		return 0, "", err
	}
	for _, f := range b.Files {
		if f.Path == b.Main {
			return vs.LastGoodVersion, string(f.Content), nil
		}
	}
	return 0, "", fmt.Errorf("bundle %s has no %s", vs.LastGood, b.Main)
}

// delivered reports whether the Pod instance's API holds the last accepted
// bundle, with generation in it, and its status says so.
func (s *podsStack) delivered(instance string, api *dataplanetest.Server, generation int) error {
	version, want, err := s.accepted()
	if err != nil {
		return err
	}
	if !strings.Contains(want, fmt.Sprintf("X-Generation %d\n", generation)) {
		return fmt.Errorf("the last accepted bundle (version %d) is not of generation %d yet", version, generation)
	}
	// The API stores a configuration as its parser writes it again.
	if want, err = dataplanetest.Normalize(want); err != nil {
		return err
	}
	if got, _ := api.Config(); got != want {
		return fmt.Errorf("%s at %s has\n%s\nwant the last accepted bundle (version %d)\n%s", instance, api.URL(), got, version, want)
	}
	st, ok := s.deploys()[instance]
	if !ok {
		return fmt.Errorf("%s has no deploy status", instance)
	}
	if st.Version != version || st.LastError != "" {
		return fmt.Errorf("%s status: version %d (want %d), last error %q", instance, st.Version, version, st.LastError)
	}
	return nil
}

// removed reports whether instance has neither a deploy status nor a
// consumer of orders.
func (s *podsStack) removed(instance string) error {
	if _, ok := s.deploys()[instance]; ok {
		return fmt.Errorf("%s still has a deploy status", instance)
	}
	_, err := s.bus.JS.Consumer(s.t.Context(), msg.StreamDeploys, deployer.InstanceConsumer("edge", instance))
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer of %s: %v, want it gone", instance, err)
	}
	return nil
}

// untouched fails the test when api was ever written to.
func untouched(t *testing.T, what string, api *dataplanetest.Server) {
	t.Helper()
	if c := api.Counts(); c != (dataplanetest.Counts{}) {
		t.Errorf("%s: its Dataplane API was used: %+v", what, c)
	}
	if cfg, _ := api.Config(); cfg != dataplanetest.DefaultConfig {
		t.Errorf("%s: its Dataplane API has\n%s", what, cfg)
	}
}

// resetConfig posts the API's initial configuration, as a Pod whose HAProxy
// container restarted from its image would have.
func resetConfig(t *testing.T, api *dataplanetest.Server) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
		api.URL()+"/v3/services/haproxy/configuration/raw?skip_version=true", strings.NewReader(dataplanetest.DefaultConfig))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain")
	req.SetBasicAuth(api.User(), api.Password())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("reset the configuration of %s: %s %s", api.URL(), resp.Status, body)
	}
}

// TestPodsAreInstancesInKubernetes runs weft on a real API server whose
// Pods are made ready, unready and deleted through the status subresource,
// as kubelets do. Each Pod's address is a loopback address served by a
// Dataplane API double on the configured port. Every ready Pod labelled
// app=haproxy gets the last accepted bundle; a Pod of another label and a
// Pod that is not ready get nothing; a Pod that stops being ready loses its
// status and its consumer and gets the bundle again when it is ready again;
// a new template reaches every ready Pod; a Pod deleted while weft was
// stopped is removed when it starts again; a Pod that becomes ready later
// gets the last accepted bundle; a terminating Pod is removed.
func TestPodsAreInstancesInKubernetes(t *testing.T) {
	haproxy := testkit.HAProxy(t)
	k := kubetest.Start(t)
	kit := newPodKit(t, k.Clientset)

	// One Dataplane API per Pod address, all on the same port.
	const user, password = "dpuser", "dppass"
	apis := map[string]*dataplanetest.Server{}
	port := ""
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		api := dataplanetest.New(t, dataplanetest.Options{User: user, Password: password, HAProxy: haproxy, Addr: ip + ":" + port})
		if port == "" {
			u, err := url.Parse(api.URL())
			if err != nil {
				t.Fatal(err)
			}
			port = u.Port()
		}
		apis[ip] = api
	}
	a, b, web, late, gone := apis["127.0.0.2"], apis["127.0.0.3"], apis["127.0.0.4"], apis["127.0.0.5"], apis["127.0.0.6"]
	const instA, instB, instWeb, instLate, instGone = "pod-lb_haproxy-0", "pod-lb_haproxy-1", "pod-lb_web-0", "pod-lb_haproxy-2", "pod-lb_haproxy-3"

	// Before weft starts: two ready haproxy Pods, a ready Pod of another
	// label, and a running haproxy Pod that is not ready.
	kit.create("haproxy-0", "haproxy")
	kit.run("haproxy-0", "127.0.0.2", true, false)
	kit.create("haproxy-3", "haproxy")
	kit.run("haproxy-3", "127.0.0.6", true, false)
	kit.create("web-0", "web")
	kit.run("web-0", "127.0.0.4", true, false)
	kit.create("haproxy-2", "haproxy")
	kit.run("haproxy-2", "127.0.0.5", false, false)

	base := t.TempDir()
	s := &podsStack{t: t, bus: testkit.NATS(t)}
	resources, err := s.bus.JS.KeyValue(t.Context(), msg.BucketResources)
	if err != nil {
		t.Fatal(err)
	}
	s.start(podsConfig(t, k.Kubeconfig, base, user, password, port, 1))

	testkit.Eventually(t, podsTimeout, func() error {
		return errors.Join(s.delivered(instA, a, 1), s.delivered(instGone, gone, 1))
	})

	// A Pod created while weft runs, its address only in podIPs, gets the
	// last accepted bundle once ready.
	kit.create("haproxy-1", "haproxy")
	testkit.Eventually(t, podsTimeout, func() error {
		_, err := resources.Get(t.Context(), msg.ResourceKey("k", "pods", "lb", "haproxy-1"))
		return err
	})
	if err := s.removed(instB); err != nil {
		t.Fatalf("a pending pod: %v", err)
	}
	kit.run("haproxy-1", "127.0.0.3", true, true)
	testkit.Eventually(t, podsTimeout, func() error { return s.delivered(instB, b, 1) })

	// Not ready: its status and consumer go. Its HAProxy restarts meanwhile
	// with the image's configuration; ready again, it gets the bundle again.
	kit.run("haproxy-1", "127.0.0.3", false, true)
	testkit.Eventually(t, podsTimeout, func() error { return s.removed(instB) })
	resetConfig(t, b)
	kit.run("haproxy-1", "127.0.0.3", true, true)
	testkit.Eventually(t, podsTimeout, func() error { return s.delivered(instB, b, 1) })

	// A new template (weft restarted on a new configuration) reaches every
	// ready Pod. A Pod deleted while weft was stopped, and gone from the
	// resources bucket before the deployer starts, is not an instance any
	// more: its status and consumer go.
	s.stop()
	if err := kit.pods.Delete(t.Context(), "haproxy-3", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	cfg2 := podsConfig(t, k.Kubeconfig, base, user, password, port, 2)
	s.start(cfg2, watcher.Service)
	testkit.Eventually(t, podsTimeout, func() error {
		_, err := resources.Get(t.Context(), msg.ResourceKey("k", "pods", "lb", "haproxy-3"))
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("deleted pod haproxy-3 in the resources bucket: %v", err)
		}
		return nil
	})
	s.start(cfg2, renderer.Service, validator.Service, deployer.Service)
	testkit.Eventually(t, podsTimeout, func() error {
		return errors.Join(s.delivered(instA, a, 2), s.delivered(instB, b, 2), s.removed(instGone))
	})
	if cfg, _ := gone.Config(); !strings.Contains(cfg, "X-Generation 1\n") {
		t.Errorf("the deleted pod's API has\n%s\nwant generation 1, delivered before it was deleted", cfg)
	}

	// Neither the Pod of another label nor the Pod that is not ready got
	// anything, through two generations.
	untouched(t, "the pod labelled app=web", web)
	untouched(t, "the pod that is not ready", late)
	for _, in := range []string{instWeb, instLate} {
		if err := s.removed(in); err != nil {
			t.Error(err)
		}
	}

	// Ready at last, it gets the last accepted bundle.
	kit.run("haproxy-2", "127.0.0.5", true, false)
	testkit.Eventually(t, podsTimeout, func() error { return s.delivered(instLate, late, 2) })

	// Deleted: bound to a node, the Pod terminates (it stays, with a
	// deletion timestamp, and still ready since no kubelet says otherwise)
	// and stops being an instance.
	if err := kit.pods.Delete(t.Context(), "haproxy-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := kit.pods.Get(t.Context(), "haproxy-0", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("haproxy-0 after a graceful delete: %v, %v; want it terminating", p, err)
	}
	testkit.Eventually(t, podsTimeout, func() error { return s.removed(instA) })
	// Gone from the API server, it stays removed.
	if err := kit.pods.Delete(t.Context(), "haproxy-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, podsTimeout, func() error {
		_, err := kit.pods.Get(t.Context(), "haproxy-0", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("haproxy-0 after a delete without grace: %v", err)
		}
		return nil
	})
	if err := s.removed(instA); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{instB, instLate} {
		if _, ok := s.deploys()[in]; !ok {
			t.Errorf("%s lost its status", in)
		}
	}
	untouched(t, "the pod labelled app=web", web)
}
