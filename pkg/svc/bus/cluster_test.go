package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/health"
	"github.com/weftio/weft/pkg/testkit"
)

// TestConsumerOutlivesItsNode runs on a real 3-node cluster: a durable
// consumer made by bus.Durable has as many replicas as its stream, so when
// the node leading it is lost for good, Consume goes on (another replica
// leads it, or it is renewed) and the messages published after the loss
// are handled; /readyz is ready again.
func TestConsumerOutlivesItsNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	b := c.Bus(t, -1)
	c.Provision(t, b)
	js := b.JS
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := testkit.NewEnv(t, b, "t")
	cfg := jetstream.ConsumerConfig{Durable: "outlives", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, FilterSubject: msg.RenderAll}
	cons, renew, err := bus.Durable(ctx, js, msg.StreamRenders, cfg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("consumer cluster info %+v, want a leader and 2 replicas", info.Cluster)
	}
	o := options(t, env)
	checks := health.NewChecks()
	o.Health, o.Renew, o.AckWait = checks, renew, 5*time.Second
	s := &seen{v: map[uint64]int{}}
	testkit.Run(t, func(ctx context.Context) error { return bus.Consume(ctx, cons, s.handle, o) })
	publish := func(v uint64) {
		testkit.Eventually(t, time.Minute, func() error {
			pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := bus.Publish(pctx, js, msg.RenderSubject("x"), fmt.Sprintf("x@%d", v), msg.Render{Target: "x", Version: v, BundleHash: "h"})
			return err
		})
	}
	publish(1)
	testkit.Eventually(t, 30*time.Second, func() error { return s.has(1) })
	lost := -1
	for i := range c.Size() {
		if c.Name(i) == info.Cluster.Leader {
			lost = i
		}
	}
	if lost < 0 {
		t.Fatalf("consumer leader %q is no node of the cluster", info.Cluster.Leader)
	}
	if err := c.Lose(lost); err != nil {
		t.Fatal(err)
	}
	publish(2)
	publish(3)
	testkit.Eventually(t, time.Minute, func() error { return s.has(2, 3) })
	testkit.Eventually(t, 30*time.Second, checks.Ready)
}

// TestSameFactPublishedTogether: replicas publishing the same message id
// at the same moment to a replicated stream (the server answers all but
// one "duplicate message id is in process") all succeed, and the stream
// holds each fact once.
func TestSameFactPublishedTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	var jss []jetstream.JetStream
	for i := range c.Size() {
		jss = append(jss, c.Bus(t, i).JS)
	}
	c.Provision(t, c.Bus(t, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const facts, publishers = 40, 6
	var wg sync.WaitGroup
	errs := make(chan error, facts*publishers)
	for f := range facts {
		start := make(chan struct{})
		for p := range publishers {
			wg.Go(func() {
				<-start
				o := msg.DeployOrder{Target: "edge", Instance: fmt.Sprint("i", f), Version: 7, BundleHash: "h", Reason: msg.OrderCatchUp}
				if _, err := bus.Publish(ctx, jss[p%len(jss)], msg.DeploySubject("edge", o.Instance), "edge."+o.Instance+"@7", o); err != nil {
					errs <- err
				}
			})
		}
		close(start)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, err := jss[0].Stream(ctx, msg.StreamDeploys)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(msg.DeployAll))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != facts {
		t.Fatalf("stream holds %d orders, want %d (one per fact)", info.State.Msgs, facts)
	}
}
