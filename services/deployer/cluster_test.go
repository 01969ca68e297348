package deployer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
)

// TestTwoReplicasWithPodsOnACluster runs two deployer replicas, on
// different nodes of a real 3-node cluster (R3 streams, buckets and
// consumers), delivering to Pods: while Pods come and go, one replica is
// restarted again and again (each start sweeps the instances of Pods gone
// while it did not run) and a NATS node is killed and restarted. No
// consumer of a Pod that is ready is ever deleted, and every ready Pod
// gets the next accepted bundle.
func TestTwoReplicasWithPodsOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	a, b := c.Bus(t, 0), c.Bus(t, 1)
	c.Provision(t, a)
	ctx := context.Background()
	api := dataplanetest.New(t, dataplanetest.Options{})
	cfg, err := config.Parse([]byte(podsYAML(api)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	// Every consumer deletion, with whether its Pod was ready then.
	var mu sync.Mutex
	live := map[string]bool{} // instance -> its Pod is ready and selected
	var wrong []string
	sub, err := a.NC.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.DELETED."+msg.StreamDeploys+".>", func(m *nats.Msg) {
		var adv struct {
			Consumer string `json:"consumer"`
		}
		if json.Unmarshal(m.Data, &adv) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for in, ready := range live {
			if ready && adv.Consumer == deployer.InstanceConsumer("edge", in) {
				wrong = append(wrong, adv.Consumer)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	pod := func(name string, ready bool) {
		mu.Lock()
		live["pod-lb_"+name] = ready
		mu.Unlock()
		testkit.Eventually(t, time.Minute, func() error { return tryPutPod(ctx, a, name, ready) })
	}

	f := &fixture{t: t, bus: a, dest: api.Dir()}
	b1 := f.store("global\n  maxconn 100\n")
	recordVerdict(t, a, msg.Validated{Target: "edge", Version: 3, BundleHash: b1.Hash, OK: true})
	for i := range 3 {
		pod(fmt.Sprintf("haproxy-%d", i), true)
	}
	envA := testkit.NewEnv(t, a, "deployer-a")
	testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, envA.Env, cfg) })
	for i := range 3 {
		status(t, a, fmt.Sprintf("pod-lb_haproxy-%d", i), 3)
	}

	// Replica b starts again and again while Pods are added, go away and
	// stop being ready; a NATS node goes down and comes back meanwhile.
	for round := range 6 {
		envB := testkit.NewEnv(t, b, "deployer-b")
		stop := testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, envB.Env, cfg) })
		pod(fmt.Sprintf("churn-%d", round), true)
		if round > 0 {
			pod(fmt.Sprintf("churn-%d", round-1), round%2 == 0)
		}
		if round == 2 {
			if err := c.Kill(2); err != nil {
				t.Fatal(err)
			}
		}
		if round == 4 {
			if err := c.Restart(2); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		stop()
	}
	envB := testkit.NewEnv(t, b, "deployer-b")
	testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, envB.Env, cfg) })

	// The next bundle reaches every ready Pod. The test's own writes wait
	// for the streams the restarted node led to have leaders again.
	c.WaitStreams(t, a, msg.ObjectStream(msg.ObjectBundles), msg.StreamValidated, "KV_"+msg.BucketStatus)
	b2 := f.store("global\n  maxconn 200\n")
	f.verdict(msg.Validated{Target: "edge", Version: 4, BundleHash: b2.Hash, OK: true})
	mu.Lock()
	var ready []string
	for in, ok := range live {
		if ok {
			ready = append(ready, in)
		}
	}
	mu.Unlock()
	for _, in := range ready {
		status(t, a, in, 4)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(wrong) > 0 {
		t.Fatalf("consumers of ready Pods deleted: %v", wrong)
	}
}

// tryPutPod stores a Pod as the watcher would, once.
func tryPutPod(ctx context.Context, bus *testkit.Bus, name string, ready bool) error {
	status := "False"
	if ready {
		status = "True"
	}
	obj := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "lb", "labels": map[string]any{"app": "haproxy"}},
		"status":   map[string]any{"podIP": "127.0.0.1", "conditions": []any{map[string]any{"type": "Ready", "status": status}}},
	}
	data, err := msg.Encode(msg.Resource{Source: "k8s", Type: "pods", Namespace: "lb", Name: name, Hash: status, Object: obj})
	if err != nil {
		return err
	}
	kv, err := bus.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, msg.ResourceKey("k8s", "pods", "lb", name), data)
	return err
}

// TestCatchUpOrdersOnACluster starts three deployer replicas together on a
// real 3-node cluster, with five instances behind the last accepted bundle
// (their status names an older version) and five up to date: each instance
// behind gets exactly one order (every replica gives the order id an
// accepted verdict gives, and the stream drops the duplicates), and every
// instance ends at the accepted bundle.
func TestCatchUpOrdersOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	buses := []*testkit.Bus{c.Bus(t, 0), c.Bus(t, 1), c.Bus(t, 2)}
	c.Provision(t, buses[0])
	ctx := context.Background()
	dir := t.TempDir()
	var names, specs []string
	for i := range 10 {
		n := fmt.Sprintf("i%d", i)
		names = append(names, n)
		specs = append(specs, fmt.Sprintf("{name: %s, dest: %s}", n, n))
	}
	cfg, err := config.Parse([]byte(`
targets:
  edge:
    base: /etc/haproxy
    deploy:
      driver: files
      dest: out
      instances: [`+strings.Join(specs, ", ")+`]
    haproxy_config: {template: unused}
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: buses[0], dest: "/etc/haproxy"}
	b := f.store("global\n  maxconn 100\n")
	recordVerdict(t, buses[0], msg.Validated{Target: "edge", Version: 7, BundleHash: b.Hash, OK: true})
	status, _ := buses[0].JS.KeyValue(ctx, msg.BucketStatus)
	behind := map[string]bool{}
	for i, n := range names {
		st := msg.DeployStatus{Target: "edge", Instance: n, Driver: "files", Version: 7, BundleHash: b.Hash}
		if i%2 == 0 {
			behind[n] = true
			st.Version, st.BundleHash = 6, "older"
		}
		if _, err := msg.StoreStatus(ctx, status, msg.DeployStatusKey("edge", n), st, 0); err != nil {
			t.Fatal(err)
		}
	}
	start := make(chan struct{})
	for i, bus := range buses {
		env := testkit.NewEnv(t, bus, fmt.Sprintf("deployer-%d", i))
		testkit.Run(t, func(ctx context.Context) error { <-start; return deployer.Run(ctx, env.Env, cfg) })
	}
	close(start)
	for _, n := range names {
		waitStatus(t, buses[0], n, 7, 1)
	}
	stream, err := buses[0].JS.Stream(ctx, msg.StreamDeploys)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(msg.DeploySubject("edge", n)))
		if err != nil {
			t.Fatal(err)
		}
		got := info.State.Subjects[msg.DeploySubject("edge", n)]
		switch {
		case behind[n] && got != 1:
			t.Errorf("%s (behind): %d orders, want 1", n, got)
		case !behind[n] && (got < 1 || got > uint64(len(buses))):
			t.Errorf("%s (up to date): %d orders, want 1 to %d (one per carried-out order the replicas read)", n, got, len(buses))
		}
	}
}

// waitStatus waits until instance of edge is at version with at least
// deploys carried out since its status was written.
func waitStatus(t *testing.T, bus *testkit.Bus, instance string, version, deploys uint64) {
	t.Helper()
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	testkit.Eventually(t, time.Minute, func() error {
		var st msg.DeployStatus
		if _, err := msg.LoadStatus(context.Background(), kv, msg.DeployStatusKey("edge", instance), &st); err != nil {
			return err
		}
		if st.Version != version || st.Deploys < deploys {
			return fmt.Errorf("%s at version %d after %d deploys, want %d after %d", instance, st.Version, st.Deploys, version, deploys)
		}
		return nil
	})
}
