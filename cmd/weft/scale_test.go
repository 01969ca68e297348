package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftio/weft/cmd/weft/internal/demo"
	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/deployer/driver/runtime"
)

// The scale rig: N Ingresses of the ingress library, each with its Service
// and EndpointSlice, delivered by the runtime driver to a real HAProxy whose
// servers are two echo backends. Every endpoint starts on backend "a"; an
// endpoint change moves one to "b" (or back), so a fresh connection to that
// Ingress's host tells which one HAProxy serves.

// scaleNamespace holds every object of the world.
const scaleNamespace = "scale"

// backend is an echo backend: its address and the name it answers.
type backend struct{ addr, name string }

// loopbackBackends are the echo backends of a world from manifests; an API
// server refuses loopback addresses in EndpointSlices, so a world on one
// uses kubeBackends, addresses of the benchmarking range (RFC 2544) that
// only a network namespace of the test's own has (inScaleNetns).
var (
	loopbackBackends = [2]backend{{"127.0.0.2", "a"}, {"127.0.0.3", "b"}}
	kubeBackends     = [2]backend{{"198.18.0.2", "a"}, {"198.18.0.3", "b"}}
)

// scaleWorld is N Ingresses (host h<i>.scale.test, class weft), each with a
// Service s<i> (port 80, named http) and an EndpointSlice s<i>-1 of one
// ready endpoint on backend on[i] at port, written as manifests perFile
// Ingresses (3·perFile objects) to a file.
type scaleWorld struct {
	n, perFile, port int
	backends         [2]backend
	mu               sync.Mutex
	on               []int            // backend of each endpoint: 0 (a) or 1 (b)
	hosts            map[int][]string // extra hosts of Ingress i, after its own
}

func newScaleWorld(n, port int, backends [2]backend) *scaleWorld {
	return &scaleWorld{n: n, perFile: 100, port: port, backends: backends, on: make([]int, n), hosts: map[int][]string{}}
}

// answer is the name of the backend that serves Ingress i.
func (w *scaleWorld) answer(i int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.backends[w.on[i]].name
}

func (w *scaleWorld) host(i int) string { return fmt.Sprintf("h%d.scale.test", i) }

// files is how many manifest files the world takes.
func (w *scaleWorld) files() int { return (w.n + w.perFile - 1) / w.perFile }

func (w *scaleWorld) fileName(f int) string { return fmt.Sprintf("objects-%04d.yaml", f) }

// fileOf is the file that holds Ingress i and its objects.
func (w *scaleWorld) fileOf(i int) int { return i / w.perFile }

const scaleIngressClass = `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: weft
spec:
  controller: weft.io/ingress
`

// manifest is file f's YAML.
func (w *scaleWorld) manifest(f int) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	b.Grow(w.perFile * 1100)
	for i := f * w.perFile; i < min(w.n, (f+1)*w.perFile); i++ {
		fmt.Fprintf(&b, "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: s%d\n  namespace: %s\nspec:\n  ingressClassName: weft\n  rules:\n", i, scaleNamespace)
		for _, h := range append([]string{w.host(i)}, w.hosts[i]...) {
			fmt.Fprintf(&b, "    - host: %s\n      http:\n        paths:\n          - path: /\n            pathType: Prefix\n            backend:\n              service:\n                name: s%d\n                port:\n                  number: 80\n", h, i)
		}
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s%d\n  namespace: %s\nspec:\n  ports:\n    - name: http\n      port: 80\n      targetPort: %d\n---\n", i, scaleNamespace, w.port)
		fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s%d-1\n  namespace: %s\n  labels:\n    kubernetes.io/service-name: s%d\naddressType: IPv4\nports:\n  - name: http\n    port: %d\nendpoints:\n  - addresses: [\"%s\"]\n    conditions:\n      ready: true\n---\n", i, scaleNamespace, i, w.port, w.backends[w.on[i]].addr)
	}
	return []byte(b.String())
}

// writeAll writes the IngressClass and every file into dir.
func (w *scaleWorld) writeAll(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "class.yaml"), []byte(scaleIngressClass), 0o644); err != nil {
		t.Fatal(err)
	}
	for f := range w.files() {
		if err := os.WriteFile(filepath.Join(dir, w.fileName(f)), w.manifest(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// flip moves endpoint i to the other backend and returns the new one's name.
func (w *scaleWorld) flip(i int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on[i] = 1 - w.on[i]
	return w.backends[w.on[i]].name
}

// addHost adds host to Ingress i's rules.
func (w *scaleWorld) addHost(i int, host string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hosts[i] = append(w.hosts[i], host)
}

// The same world as Kubernetes objects.

func (w *scaleWorld) ingressObject(i int) *networkingv1.Ingress {
	w.mu.Lock()
	defer w.mu.Unlock()
	class, prefix := "weft", networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: scaleNamespace},
		Spec:       networkingv1.IngressSpec{IngressClassName: &class},
	}
	for _, h := range append([]string{w.host(i)}, w.hosts[i]...) {
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{Host: h, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: fmt.Sprintf("s%d", i), Port: networkingv1.ServiceBackendPort{Number: 80},
			}}}},
		}}})
	}
	return ing
}

func (w *scaleWorld) serviceObject(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: scaleNamespace},
		// Headless: the test API server's service range has a few hundred
		// cluster IPs, and the Ingress library reads only the ports.
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(w.port))}}},
	}
}

func (w *scaleWorld) sliceObject(i int) *discoveryv1.EndpointSlice {
	w.mu.Lock()
	defer w.mu.Unlock()
	name, port, ready := "http", int32(w.port), true
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("s%d-1", i), Namespace: scaleNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("s%d", i)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{w.backends[w.on[i]].addr}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
}

// scaleClient is a clientset for bulk writes: client-go's default of 5
// requests a second would make creating 30,000 objects take hours.
func scaleClient(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 5000, 10000
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// createAll creates the namespace, the IngressClass and every object on the
// API server, on 8 connections at once.
func (w *scaleWorld) createAll(t testing.TB, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "weft"}, Spec: networkingv1.IngressClassSpec{Controller: "weft.io/ingress"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if _, err := cs.CoreV1().Services(scaleNamespace).Create(ctx, w.serviceObject(i), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if _, err := cs.DiscoveryV1().EndpointSlices(scaleNamespace).Create(ctx, w.sliceObject(i), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if _, err := cs.NetworkingV1().Ingresses(scaleNamespace).Create(ctx, w.ingressObject(i), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range w.n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	if err != nil {
		t.Fatalf("create the scale objects: %v", err)
	}
}

// scaleSource says where the world lives: "manifests" (files under the
// stack's manifests/) or "kube" (a real kube-apiserver).
type scaleSource string

const (
	fromManifests scaleSource = "manifests"
	fromKube      scaleSource = "kube"
)

// scaleStack is weft (every service in this process, over an embedded NATS
// server) delivering the world to a real HAProxy with the runtime driver.
type scaleStack struct {
	*stack
	w    *scaleWorld
	src  scaleSource
	port int // HAProxy's HTTP port
	drv  *runtime.Driver
	kube kubernetes.Interface
	// started is when the services were started.
	started time.Time
}

// scaleDebounce is the renderer's debounce in the rig: none (a render
// starts once the target's previous one is done, with every change since).
const scaleDebounce = "0s"

// scaleConfig is weft.yaml of the rig: the ingress library, scaleDebounce,
// every bundle validated by haproxy -c, the runtime driver.
func scaleConfig(src scaleSource, kubeconfig string, httpPort int, dir string) string {
	source := "  - {name: manifests, type: manifests, path: manifests}\n"
	if src == fromKube {
		source = fmt.Sprintf("  - {name: kube, type: kubernetes, kubeconfig: %s}\n", kubeconfig)
	}
	master, admin := filepath.Join(dir, "master.sock"), filepath.Join(dir, "admin.sock")
	return fmt.Sprintf(`sources:
%swatched_resources_ignore_fields: [metadata.managedFields]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress, index_by: ["metadata.namespace", "metadata.name"]}
  ingressclasses: {api_version: networking.k8s.io/v1, kind: IngressClass, index_by: ["metadata.name"]}
  services: {api_version: v1, kind: Service, index_by: ["metadata.namespace", "metadata.name"]}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice, index_by: ["metadata.namespace", "metadata.labels['kubernetes.io/service-name']"]}
  secrets: {api_version: v1, kind: Secret, index_by: ["metadata.namespace", "metadata.name"]}
targets:
  scale:
    library: ingress
    library_options:
      ingress_class: weft
      bind_address: 127.0.0.1
      http_port: "%d"
      admin_socket: %s
    render: {debounce: %s}
    validate: {kinds: [haproxy], timeout: 120s}
    deploy: {driver: runtime, dest: out, master_socket: %s, admin_socket: %s}
`, source, httpPort, admin, scaleDebounce, master, admin)
}

// prepareScale lays out the world (files, or objects on a new
// kube-apiserver), the echo backends and a folder holding weft.yaml and
// manifests/, without starting weft.
func prepareScale(b testing.TB, src scaleSource, n int) (w *scaleWorld, dir string, kube *kubetest.Env, cs kubernetes.Interface, httpPort int) {
	b.Helper()
	testkit.HAProxy(b)
	backendPort := testkit.FreePort(b)
	httpPort = testkit.FreePort(b)
	backends := loopbackBackends
	if src == fromKube {
		backends = kubeBackends
	}
	for _, e := range backends {
		echo(b, net.JoinHostPort(e.addr, strconv.Itoa(backendPort)), e.name)
	}
	w = newScaleWorld(n, backendPort, backends)
	dir = b.TempDir()
	if src == fromKube {
		kube = kubetest.Start(b)
		cs = scaleClient(b, kube.Config)
		w.createAll(b, cs)
	} else {
		w.writeAll(b, filepath.Join(dir, "manifests"))
	}
	return w, dir, kube, cs, httpPort
}

// startScale starts HAProxy and weft on a prepared world in dir, which
// becomes the stack's folder.
func startScale(b testing.TB, src scaleSource, w *scaleWorld, dir string, kube *kubetest.Env, cs kubernetes.Interface, httpPort int) *scaleStack {
	b.Helper()
	kubeconfig := ""
	if kube != nil {
		kubeconfig = kube.Kubeconfig
	}
	ss := &scaleStack{w: w, src: src, port: httpPort, kube: cs}
	if err := os.WriteFile(filepath.Join(dir, "weft.yaml"), []byte(scaleConfig(src, kubeconfig, httpPort, dir)), 0o644); err != nil {
		b.Fatal(err)
	}
	ss.drv = startScaleHAProxy(b, dir, httpPort)
	cfg, err := config.Load(filepath.Join(dir, "weft.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	s := &stack{t: b, dir: dir, cfg: cfg, bus: testkit.NATS(b)}
	s.env = testkit.NewEnv(b, s.bus, "scale")
	// weft up's tracer, which keeps no span: the test environment's
	// recorder keeps every one, hundreds of MB at 100,000 objects
	// (kept when -scale-spans asks for them).
	if *scaleSpans == "" {
		s.env.Env.Tracer = telemetry.NewTracerProvider()
	}
	ss.started = time.Now()
	var stops []func()
	for _, sv := range Services {
		stops = append(stops, testkit.Run(b, func(ctx context.Context) error { return sv.Run(ctx, s.env.Env, cfg) }))
	}
	s.stop = func() {
		for _, f := range stops {
			f()
		}
	}
	ss.stack = s
	return ss
}

// startScaleHAProxy starts HAProxy (master-worker, until the test ends)
// on the bootstrap configuration in dir/out, listening on httpPort, and
// returns a runtime driver on its sockets.
func startScaleHAProxy(b testing.TB, dir string, httpPort int) *runtime.Driver {
	b.Helper()
	master, admin := filepath.Join(dir, "master.sock"), filepath.Join(dir, "admin.sock")
	ctx, cancel := context.WithCancel(context.Background())
	hp, err := demo.StartHAProxy(ctx, demo.HAProxyOptions{
		Bin: testkit.HAProxy(b), Dir: filepath.Join(dir, "out"), Listen: "127.0.0.1:" + strconv.Itoa(httpPort),
		Log: slog.New(slog.DiscardHandler), MasterSocket: master, AdminSocket: admin,
	})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); _ = hp.Wait() })
	drv, err := runtime.New(runtime.Options{Dir: filepath.Join(dir, "out"), MasterSocket: master, AdminSocket: admin})
	if err != nil {
		b.Fatal(err)
	}
	return drv
}

// served waits until a fresh connection to host is answered by the
// backend named want, asking every millisecond, and returns when; it fails
// after timeout.
func (s *scaleStack) served(b testing.TB, host, want string, timeout time.Duration) time.Time {
	b.Helper()
	return s.servedEvery(b, host, want, timeout, time.Millisecond)
}

// loadPoll is how often allServed asks: an initial load is timed to 10 ms.
// Asking every millisecond for the tens of seconds a large load takes cost
// the services in the same process a sixth of a CPU (dialing alone, 4.7 of
// the 60 CPU-s of BenchmarkHundredThousand), and HAProxy as much again.
const loadPoll = 10 * time.Millisecond

// servedEvery is served asking every interval.
func (s *scaleStack) servedEvery(b testing.TB, host, want string, timeout, every time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	var got string
	for time.Now().Before(deadline) {
		var phases string
		if got, phases = tracedGet(s.port, host, "/"); got == "200 "+want {
			return time.Now()
		}
		if phases != "" {
			b.Logf("slow probe of %s (want %s, got %q): %s", host, want, got, phases)
		}
		time.Sleep(every)
	}
	b.Fatalf("%s never answered %q within %s (last: %q)", host, want, timeout, got)
	return time.Time{}
}

// only checks that a few more fresh connections to host are all answered
// by want: the old backend is gone, not merely one of two.
func (s *scaleStack) only(b testing.TB, host, want string) {
	b.Helper()
	for range 4 {
		if got := httpGet(s.port, host, "/"); got != "200 "+want {
			b.Fatalf("%s answered %q after %q did", host, got, want)
		}
	}
}

// flip changes endpoint i's address (in its manifest file, or on the API
// server) and returns the name of the backend that is to answer.
func (s *scaleStack) flip(b testing.TB, i int) string {
	b.Helper()
	want := s.w.flip(i)
	s.update(b, i, false)
	return want
}

// update writes Ingress i's objects as the world now has them: the file
// holding them, or on the API server its EndpointSlice (ingress false) or
// its Ingress.
func (s *scaleStack) update(b testing.TB, i int, ingress bool) {
	b.Helper()
	if s.src == fromManifests {
		s.writeManifest(s.w.fileName(s.w.fileOf(i)), string(s.w.manifest(s.w.fileOf(i))))
		return
	}
	ctx := context.Background()
	if ingress {
		cur, err := s.kube.NetworkingV1().Ingresses(scaleNamespace).Get(ctx, fmt.Sprintf("s%d", i), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cur.Spec = s.w.ingressObject(i).Spec
		if _, err := s.kube.NetworkingV1().Ingresses(scaleNamespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		return
	}
	cur, err := s.kube.DiscoveryV1().EndpointSlices(scaleNamespace).Get(ctx, fmt.Sprintf("s%d-1", i), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cur.Endpoints = s.w.sliceObject(i).Endpoints
	if _, err := s.kube.DiscoveryV1().EndpointSlices(scaleNamespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
}

// sample is a spread of Ingress indices: the first, the last and some
// between, in different files.
func (w *scaleWorld) sample(k int) []int {
	out := []int{0, w.n - 1}
	for j := 1; j < k-1; j++ {
		out = append(out, (j*7919)%w.n)
	}
	return out
}

// allServed waits until a sample of hosts is answered by backend "a" (the
// configuration is loaded whole, so the first answer of each means the
// deploy carrying it is served), returns when, then checks every host.
func (s *scaleStack) allServed(b testing.TB, timeout time.Duration) time.Time {
	b.Helper()
	var at time.Time
	for _, i := range s.w.sample(8) {
		at = s.servedEvery(b, s.w.host(i), s.w.answer(i), timeout, loadPoll)
	}
	for i := range s.w.n {
		if got, want := httpGet(s.port, s.w.host(i), "/"), "200 "+s.w.answer(i); got != want {
			b.Fatalf("%s answered %q, want %q", s.w.host(i), got, want)
		}
	}
	return at
}

// reloads is the count of HAProxy reloads so far (show proc on the master
// socket).
func (s *scaleStack) reloads(b testing.TB) int {
	n, err := s.drv.Reloads(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// pipelineStages are the log messages that mark, in order, where a change
// is: read by the watcher (manifests only), rendered, validated. The
// deployer logs "deployed" once HAProxy already serves the change, so the
// deploy is the rest: until the answer.
var pipelineStages = []struct{ msg, metric string }{
	{"source applied", "watch-ms"},
	{"rendered", "render-ms"},
	{"bundle accepted", "validate-ms"},
}

// stageMedians splits each change's time (from starts[k] to ends[k], when
// it was answered) at the first log line of each stage after the previous
// one, and returns the median of each part in milliseconds: what a stage
// took, including its wait for the one before (a stage without a line,
// such as the watcher's for API server events, adds to the next). deploy-ms
// is from the validation until the answer.
func stageMedians(logs string, starts, ends []time.Time) map[string]float64 {
	type event struct {
		Time time.Time `json:"time"`
		Msg  string    `json:"msg"`
	}
	var events []event
	for line := range strings.Lines(logs) {
		var e event
		if json.Unmarshal([]byte(line), &e) == nil {
			events = append(events, e)
		}
	}
	parts := map[string][]float64{}
	for k := range starts {
		at := starts[k]
		for _, st := range pipelineStages {
			for _, e := range events {
				if e.Msg == st.msg && !e.Time.Before(at) && !e.Time.After(ends[k]) {
					parts[st.metric] = append(parts[st.metric], float64(e.Time.Sub(at).Microseconds())/1000)
					at = e.Time
					break
				}
			}
		}
		parts["deploy-ms"] = append(parts["deploy-ms"], float64(ends[k].Sub(at).Microseconds())/1000)
	}
	out := map[string]float64{}
	for metric, v := range parts {
		slices.Sort(v)
		out[metric] = v[len(v)/2]
	}
	return out
}
