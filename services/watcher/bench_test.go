package watcher_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher"
)

const kubeCfg = `
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress}
  services: {api_version: v1, kind: Service}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice}
targets: {}
`

// createMix creates n objects in namespace ns: a third each Ingresses,
// Services and EndpointSlices, eight requests at a time.
func createMix(b *testing.B, cs kubernetes.Interface, ns string, n int) {
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				name := fmt.Sprintf("app-%05d", i/3)
				var err error
				switch i % 3 {
				case 0:
					pt := networkingv1.PathTypePrefix
					_, err = cs.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{
						ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: name + ".example.com",
							IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
								Path: "/", PathType: &pt, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}},
					}, metav1.CreateOptions{})
				case 1:
					_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
						ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}, // headless: the test server has a small IP range
					}, metav1.CreateOptions{})
				case 2:
					_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, endpointSlice(name, "10.0.0.1"), metav1.CreateOptions{})
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

func endpointSlice(name, addr string) *discoveryv1.EndpointSlice {
	port := int32(8080)
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/service-name": name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkInitialSync10k lists 10,000 objects (Ingresses, Services,
// EndpointSlices) from a real API server into the resources bucket: the time
// until every type is synced and every write announced, and the heap the
// watcher holds afterwards.
func BenchmarkInitialSync10k(b *testing.B) {
	k := kubetest.Start(b)
	const n = 10_000
	createMix(b, k.Clientset, "bench", n)
	cfg, err := config.Parse(fmt.Appendf(nil, kubeCfg, k.Kubeconfig), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		bus := testkit.NATS(b)
		env := testkit.NewEnv(b, bus, "bench")
		before := heapInUse()
		b.StartTimer()
		start := time.Now()
		stop := testkit.Run(b, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
		testkit.Eventually(b, 5*time.Minute, func() error {
			st, err := bus.JS.Stream(context.Background(), msg.StreamChanges)
			if err != nil {
				return err
			}
			info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(msg.ChangeAll))
			if err != nil {
				return err
			}
			var changes uint64
			for _, c := range info.State.Subjects {
				changes += c
			}
			if changes < n {
				return fmt.Errorf("%d of %d changes announced", changes, n)
			}
			return nil
		})
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(took.Milliseconds()), "ms/sync")
		b.ReportMetric(float64(heapInUse()-before)/(1<<20), "MiB-held")
		stop()
		b.StartTimer()
	}
}

// BenchmarkChangeThroughput updates 1,000 EndpointSlices in the API server
// and measures events to change messages per second, beside the raw
// JetStream publish rate of the same number of messages measured in the
// same run.
func BenchmarkChangeThroughput(b *testing.B) {
	k := kubetest.Start(b)
	const n = 1_000
	createMix(b, k.Clientset, "tp", 3*n)
	cfg, err := config.Parse(fmt.Appendf(nil, kubeCfg, k.Kubeconfig), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	bus := testkit.NATS(b)
	env := testkit.NewEnv(b, bus, "bench")
	testkit.Run(b, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	ctx := context.Background()
	changes := func() uint64 {
		st, _ := bus.JS.Stream(ctx, msg.StreamChanges)
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(msg.ChangeSubject("k", "endpoints")))
		if err != nil {
			b.Fatal(err)
		}
		var c uint64
		for _, v := range info.State.Subjects {
			c += v
		}
		return c
	}
	testkit.Eventually(b, 5*time.Minute, func() error {
		if c := changes(); c < n {
			return fmt.Errorf("initial: %d", c)
		}
		return nil
	})
	if _, err := bus.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		base := changes()
		start := time.Now()
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					name := fmt.Sprintf("app-%05d", j)
					if _, err := k.Clientset.DiscoveryV1().EndpointSlices("tp").Update(ctx, endpointSlice(name, fmt.Sprintf("10.1.%d.%d", i%250, j%250)), metav1.UpdateOptions{}); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for j := range n {
			jobs <- j
		}
		close(jobs)
		wg.Wait()
		updated := time.Now()
		testkit.Eventually(b, 5*time.Minute, func() error {
			if c := changes(); c < base+n {
				return fmt.Errorf("%d of %d", c-base, n)
			}
			return nil
		})
		weft := time.Since(start)
		b.ReportMetric(float64(time.Since(updated).Milliseconds()), "ms-lag-after-last-update")
		payload := make([]byte, 600)
		start = time.Now()
		for j := range n {
			if _, err := bus.JS.Publish(ctx, fmt.Sprintf("raw.%d", j), payload); err != nil {
				b.Fatal(err)
			}
		}
		raw := time.Since(start)
		b.ReportMetric(float64(n)/weft.Seconds(), "changes/s")
		b.ReportMetric(float64(n)/raw.Seconds(), "raw-publish/s")
		b.ReportMetric(weft.Seconds()/raw.Seconds(), "x-raw")
	}
}
