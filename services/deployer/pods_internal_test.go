package deployer

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
)

// TestPodInstanceName: Pods whose namespace and name join alike with a
// dash, or differ only by dots, still get instance names of their own,
// each a subject token.
func TestPodInstanceName(t *testing.T) {
	pods := [][2]string{
		{"team-a", "web"}, {"team", "a-web"},
		{"lb", "haproxy.0"}, {"lb", "haproxy-0"}, {"lb-haproxy", "0"},
		{"a", "b.c"}, {"a-b", "c"}, {"a", "b-c"},
	}
	seen := map[string][2]string{}
	for _, p := range pods {
		name := podInstanceName(p[0], p[1])
		if err := msg.ValidToken(name); err != nil {
			t.Errorf("%s/%s: %v", p[0], p[1], err)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%s/%s and %s/%s are both %s", p[0], p[1], other[0], other[1], name)
		}
		seen[name] = p
		if ns, pod, ok := podOfInstance(name); !ok || ns != p[0] || pod != p[1] {
			t.Errorf("%s reads back as %q/%q (%v)", name, ns, pod, ok)
		}
	}
	if got := podInstanceName("lb", "haproxy-0.x"); got != "pod-lb_haproxy-0_x" {
		t.Errorf("lb/haproxy-0.x is %s", got)
	}
}

// TestSweepLeavesAnotherReplicasPods: a starting replica's sweep runs on
// its first read of the Pods; a Pod another replica added after that read
// (its consumer and status exist, its Pod is in the bucket, ready) is left
// in place, while the instance of a Pod that is gone, or not ready, is
// removed.
func TestSweepLeavesAnotherReplicasPods(t *testing.T) {
	nb := testkit.NATS(t)
	ctx := context.Background()
	status, _ := nb.JS.KeyValue(ctx, msg.BucketStatus)
	resources, _ := nb.JS.KeyValue(ctx, msg.BucketResources)
	d := &deployer{env: testkit.NewEnv(t, nb, "deployer-b").Env, status: status}
	target := config.Target{Deploy: config.Deploy{Driver: "dataplane", Pods: &config.Pods{Type: "pods", LabelSelector: "app=haproxy", Port: 5555, Scheme: "http"}}}
	p, err := newPodFollower(d, "edge", target, bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pods := []struct {
		name     string
		inBucket bool
		ready    bool
		kept     bool
	}{
		{"haproxy-1", true, true, true},    // added by another replica after the first read
		{"haproxy.2", true, true, true},    // a dotted name, the same
		{"haproxy-3", false, false, false}, // gone
		{"haproxy-4", true, false, false},  // no longer ready
	}
	for _, pod := range pods {
		name := podInstanceName("lb", pod.name)
		if pod.inBucket {
			cond := "False"
			if pod.ready {
				cond = "True"
			}
			obj := map[string]any{
				"metadata": map[string]any{"name": pod.name, "namespace": "lb", "labels": map[string]any{"app": "haproxy"}},
				"status":   map[string]any{"podIP": "10.0.0.1", "conditions": []any{map[string]any{"type": "Ready", "status": cond}}},
			}
			data, err := msg.Encode(msg.Resource{Source: "k8s", Type: "pods", Namespace: "lb", Name: pod.name, Hash: cond, Object: obj})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := resources.Put(ctx, msg.ResourceKey("k8s", "pods", "lb", pod.name), data); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nb.JS.CreateConsumer(ctx, msg.StreamDeploys, jetstream.ConsumerConfig{
			Durable: InstanceConsumer("edge", name), FilterSubject: msg.DeploySubject("edge", name),
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := status.Put(ctx, msg.DeployStatusKey("edge", name), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	p.sweep(ctx)
	for _, pod := range pods {
		name := podInstanceName("lb", pod.name)
		_, cerr := nb.JS.Consumer(ctx, msg.StreamDeploys, InstanceConsumer("edge", name))
		_, serr := status.Get(ctx, msg.DeployStatusKey("edge", name))
		switch {
		case pod.kept && (cerr != nil || serr != nil):
			t.Errorf("%s: consumer %v, status %v; want both kept", pod.name, cerr, serr)
		case !pod.kept && (!errors.Is(cerr, jetstream.ErrConsumerNotFound) || !errors.Is(serr, jetstream.ErrKeyNotFound)):
			t.Errorf("%s: consumer %v, status %v; want both removed", pod.name, cerr, serr)
		}
	}
}
