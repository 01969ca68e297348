package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/testkit"
)

// clusterKV creates an R3 key-value bucket on c through a client that knows
// every node, and returns it with a function that connects to node i alone.
func clusterKV(t *testing.T, c *testkit.Cluster) (jetstream.KeyValue, func(i int) jetstream.KeyValue) {
	t.Helper()
	connect := func(url string) jetstream.JetStream {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	// A request made while the new cluster still elects its meta leader
	// gets no answer: ask again, with a short timeout each time.
	js := connect(c.URL())
	var kv jetstream.KeyValue
	testkit.Eventually(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "chaos", Replicas: 3})
		return err
	})
	one := func(i int) jetstream.KeyValue {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		kv, err := connect(c.URLs()[i]).KeyValue(ctx, "chaos")
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	return kv, one
}

// put writes key=value, retrying while the bucket's leader moves.
func put(t *testing.T, kv jetstream.KeyValue, key, value string) {
	t.Helper()
	testkit.Eventually(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := kv.PutString(ctx, key, value)
		return err
	})
}

// holds polls until kv has exactly want.
func holds(t *testing.T, kv jetstream.KeyValue, want map[string]string, through string) {
	t.Helper()
	testkit.Eventually(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for k, v := range want {
			e, err := kv.Get(ctx, k)
			if err != nil {
				return fmt.Errorf("through %s: get %s: %w", through, k, err)
			}
			if string(e.Value()) != v {
				return fmt.Errorf("through %s: %s = %q, want %q", through, k, e.Value(), v)
			}
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return fmt.Errorf("through %s: %w", through, err)
		}
		var n int
		for range keys.Keys() {
			n++
		}
		if n != len(want) {
			return fmt.Errorf("through %s: %d keys, want %d", through, n, len(want))
		}
		return nil
	})
}

// TestNATSClusterKVSurvivesKillAndRestartOfEachNode kills each node of a
// 3-node cluster in turn with SIGKILL: an R3 bucket keeps taking writes and
// serving reads on the other two, and the restarted node catches up, so in
// the end every node alone serves everything written.
func TestNATSClusterKVSurvivesKillAndRestartOfEachNode(t *testing.T) {
	c := testkit.NATSCluster(t)
	kv, one := clusterKV(t, c)
	want := map[string]string{}
	for k := range 5 {
		key := fmt.Sprintf("before.%d", k)
		want[key] = key
		put(t, kv, key, key)
	}
	for i := range c.Size() {
		if err := c.Kill(i); err != nil {
			t.Fatal(err)
		}
		if c.Running(i) {
			t.Fatalf("%s still runs after Kill", c.Name(i))
		}
		for k := range 5 {
			key := fmt.Sprintf("without-%s.%d", c.Name(i), k)
			want[key] = key
			put(t, kv, key, key)
		}
		put(t, kv, "before.0", "overwritten without "+c.Name(i))
		want["before.0"] = "overwritten without " + c.Name(i)
		holds(t, kv, want, "the cluster with "+c.Name(i)+" down")
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range c.Size() {
		holds(t, one(i), want, c.Name(i)+" alone")
	}
}

// TestNATSClusterLostNodeReplaced loses a node with its disk, removes it
// from the meta group and brings a fresh node in its place: the R3 bucket
// keeps its data, its replicas move to the new node, and the new node alone
// serves everything.
func TestNATSClusterLostNodeReplaced(t *testing.T) {
	c := testkit.NATSCluster(t)
	kv, one := clusterKV(t, c)
	want := map[string]string{}
	for k := range 10 {
		key := fmt.Sprintf("k%d", k)
		want[key] = key
		put(t, kv, key, key)
	}
	lost := c.Name(1)
	if err := c.Lose(1); err != nil {
		t.Fatal(err)
	}
	put(t, kv, "after-loss", "x")
	want["after-loss"] = "x"
	fresh, err := c.Replace(1)
	if err != nil {
		t.Fatal(err)
	}
	if fresh == lost || c.Name(1) != fresh {
		t.Fatalf("replacement of %s is named %q (node 1 is %s)", lost, fresh, c.Name(1))
	}
	testkit.Eventually(t, 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := kv.Status(ctx)
		if err != nil {
			return err
		}
		info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
		if info.Cluster == nil {
			return errors.New("no cluster info")
		}
		peers := []string{info.Cluster.Leader}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("replica %s not current", r.Name)
			}
			peers = append(peers, r.Name)
		}
		if slices.Contains(peers, lost) || !slices.Contains(peers, fresh) {
			return fmt.Errorf("bucket peers %v: want %s in place of %s", peers, fresh, lost)
		}
		return nil
	})
	holds(t, one(1), want, fresh+" alone")
}
