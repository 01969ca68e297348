package deployer_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
)

// putPod stores a Pod as the watcher would.
func putPod(t *testing.T, bus *testkit.Bus, name, ip, app string, ready bool) {
	t.Helper()
	status := "False"
	if ready {
		status = "True"
	}
	obj := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "lb", "labels": map[string]any{"app": app}},
		"status":   map[string]any{"podIP": ip, "conditions": []any{map[string]any{"type": "Ready", "status": status}}},
	}
	data, err := msg.Encode(msg.Resource{Source: "k8s", Type: "pods", Namespace: "lb", Name: name, Hash: fmt.Sprint(ip, ready, app), Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketResources)
	if _, err := kv.Put(context.Background(), msg.ResourceKey("k8s", "pods", "lb", name), data); err != nil {
		t.Fatal(err)
	}
}

// podsYAML is a target edge delivering through the Dataplane APIs of
// the ready Pods labelled app=haproxy, on api's port.
func podsYAML(api *dataplanetest.Server) string {
	u, _ := url.Parse(api.URL())
	return fmt.Sprintf(`
watched_resources:
  pods: {api_version: v1, kind: Pod}
targets:
  edge:
    base: %s
    deploy:
      driver: dataplane
      dataplane: {user: %s, password: %s}
      pods: {type: pods, label_selector: "app=haproxy", port: %s}
    haproxy_config: {template: unused}
`, api.Dir(), api.User(), api.Password(), u.Port())
}

// TestPodsAreInstances follows Pods in the resources bucket: a ready Pod
// the selector picks is an instance that gets the last accepted bundle
// through its Dataplane API; other Pods are not; a Pod that stops being
// ready is removed with its status, and gets the bundle again when it
// comes back.
func TestPodsAreInstances(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{HAProxy: testkit.HAProxy(t)})
	bus := testkit.NATS(t)
	yaml := podsYAML(api)
	f, _ := run(t, bus, t.TempDir(), api.Dir(), yaml)
	b := f.store("global\n  maxconn 100\n\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 5s\n  timeout server 5s\n\nfrontend f\n  bind 127.0.0.1:18099\n")
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	if _, err := msg.StoreStatus(context.Background(), kv, msg.ValidationStatusKey("edge"),
		msg.ValidationStatus{Target: "edge", Version: 3, BundleHash: b.Hash, OK: true, LastGood: b.Hash, LastGoodVersion: 3}, 0); err != nil {
		t.Fatal(err)
	}

	putPod(t, bus, "web-0", "10.1.1.1", "web", true) // not selected
	putPod(t, bus, "haproxy-0", "127.0.0.1", "haproxy", true)
	st := status(t, bus, "pod-lb_haproxy-0", 3)
	if st.LastError != "" || st.Reloads["structure"] != 1 {
		t.Fatalf("pod instance status = %+v", st)
	}
	if cfg, _ := api.Config(); cfg == dataplanetest.DefaultConfig {
		t.Fatal("the API still has its initial configuration")
	}
	if _, err := kv.Get(context.Background(), msg.DeployStatusKey("edge", "pod-lb_web-0")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("unselected pod has a status: %v", err)
	}

	putPod(t, bus, "haproxy-0", "127.0.0.1", "haproxy", false)
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := kv.Get(context.Background(), msg.DeployStatusKey("edge", "pod-lb_haproxy-0"))
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("status of a pod that is not ready: %v", err)
		}
		return nil
	})

	putPod(t, bus, "haproxy-0", "127.0.0.1", "haproxy", true)
	if st := status(t, bus, "pod-lb_haproxy-0", 3); st.Deploys != 1 || st.LastError != "" {
		t.Fatalf("returning pod: %+v", st)
	}
	if n := api.Counts().Reloads; n != 1 {
		t.Fatalf("%d reloads, want 1 (the returning pod already has the bundle)", n)
	}
	// One watch of the Pods served it all: none ended and was started again.
	if logs := f.env.Logs.String(); strings.Contains(logs, "pod watch ended") {
		t.Fatalf("the pod watch ended while nothing failed:\n%s", logs)
	}
}

// TestGonePodsAreRemovedAtStart stops the deployer, then one Pod goes away
// and another stops being ready: the next deployer removes both instances'
// statuses and consumers, and a consumer left without a status, but no
// consumer of another target.
func TestGonePodsAreRemovedAtStart(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	bus := testkit.NATS(t)
	ctx := context.Background()
	yaml := podsYAML(api)
	f, stop := run(t, bus, t.TempDir(), api.Dir(), yaml)
	b := f.store("global\n  maxconn 100\n")
	kv, _ := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if _, err := msg.StoreStatus(ctx, kv, msg.ValidationStatusKey("edge"),
		msg.ValidationStatus{Target: "edge", Version: 3, BundleHash: b.Hash, OK: true, LastGood: b.Hash, LastGoodVersion: 3}, 0); err != nil {
		t.Fatal(err)
	}
	putPod(t, bus, "haproxy-0", "127.0.0.1", "haproxy", true)
	putPod(t, bus, "haproxy-1", "127.0.0.1", "haproxy", true)
	putPod(t, bus, "haproxy-2", "127.0.0.1", "haproxy", true)
	for _, in := range []string{"pod-lb_haproxy-0", "pod-lb_haproxy-1", "pod-lb_haproxy-2"} {
		status(t, bus, in, 3)
	}
	stop()

	resources, _ := bus.JS.KeyValue(ctx, msg.BucketResources)
	if err := resources.Delete(ctx, msg.ResourceKey("k8s", "pods", "lb", "haproxy-0")); err != nil {
		t.Fatal(err)
	}
	putPod(t, bus, "haproxy-1", "127.0.0.1", "haproxy", false)
	for name, target := range map[string]string{"pod-lb_ghost": "edge", "other": "edge2"} {
		if _, err := bus.JS.CreateConsumer(ctx, msg.StreamDeploys, jetstream.ConsumerConfig{
			Durable: "deployer-" + target + "-" + name, FilterSubject: msg.DeploySubject(target, name),
		}); err != nil {
			t.Fatal(err)
		}
	}

	run(t, bus, t.TempDir(), api.Dir(), yaml)
	testkit.Eventually(t, 15*time.Second, func() error {
		for _, in := range []string{"pod-lb_haproxy-0", "pod-lb_haproxy-1", "pod-lb_ghost"} {
			if _, err := kv.Get(ctx, msg.DeployStatusKey("edge", in)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("status of %s: %v, want none", in, err)
			}
			if _, err := bus.JS.Consumer(ctx, msg.StreamDeploys, deployer.InstanceConsumer("edge", in)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("consumer of %s: %v, want none", in, err)
			}
		}
		return nil
	})
	if st := status(t, bus, "pod-lb_haproxy-2", 3); st.LastError != "" {
		t.Fatalf("the remaining pod: %+v", st)
	}
	if _, err := bus.JS.Consumer(ctx, msg.StreamDeploys, "deployer-edge2-other"); err != nil {
		t.Fatalf("consumer of another target: %v", err)
	}
}

// TestPodReadyAsAVerdictIsPublished makes a Pod ready while a verdict is
// published that the validator has not stored yet (it stores right after
// publishing): the Pod catches up to the stored bundle, and gets the new
// one once the status confirms the verdict.
func TestPodReadyAsAVerdictIsPublished(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	bus := testkit.NATS(t)
	ctx := context.Background()
	yaml := podsYAML(api)
	f, _ := run(t, bus, t.TempDir(), api.Dir(), yaml)
	old, b := f.store("global\n  maxconn 100\n"), f.store("global\n  maxconn 200\n")
	kv, _ := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if _, err := msg.StoreStatus(ctx, kv, msg.ValidationStatusKey("edge"),
		msg.ValidationStatus{Target: "edge", Version: 3, BundleHash: old.Hash, OK: true, LastGood: old.Hash, LastGoodVersion: 3}, 0); err != nil {
		t.Fatal(err)
	}
	f.publish(msg.ValidatedSubject("edge"), msg.Validated{Target: "edge", Version: 4, BundleHash: b.Hash, OK: true, At: time.Now()})
	putPod(t, bus, "haproxy-0", "127.0.0.1", "haproxy", true)
	testkit.Eventually(t, 15*time.Second, func() error { // the Pod is an instance
		_, err := bus.JS.Consumer(ctx, msg.StreamDeploys, deployer.InstanceConsumer("edge", "pod-lb_haproxy-0"))
		return err
	})
	recordVerdict(t, bus, msg.Validated{Target: "edge", Version: 4, BundleHash: b.Hash, OK: true})
	if st := status(t, bus, "pod-lb_haproxy-0", 4); st.BundleHash != b.Hash {
		t.Fatalf("pod status %+v, want bundle %s", st, b.Hash)
	}
	want, err := dataplanetest.Normalize("global\n  maxconn 200\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := api.Config(); cfg != want {
		t.Fatalf("the pod's API has %q, want %q", cfg, want)
	}
}
