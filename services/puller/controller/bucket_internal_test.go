package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// nodeObject is a Node as the watcher stores it.
func nodeObject(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name, "uid": name, "resourceVersion": "1"}}
}

func resourcesBucket(t testing.TB, bus *testkit.Bus) jetstream.KeyValue {
	t.Helper()
	kv, err := bus.JS.KeyValue(context.Background(), msg.BucketResources)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// objects.list returns the type's objects by key order, with their last
// values: not a deleted one, nor one of another type or source.
func TestObjectsList(t *testing.T) {
	bus := testkit.NATS(t)
	o := objects{kv: resourcesBucket(t, bus), source: "cluster"}
	ctx := context.Background()
	for _, name := range []string{"c", "a", "gone", "b"} {
		testkit.PutResource(t, bus.JS, "cluster", "nodes", nodeObject(name))
	}
	changed := nodeObject("a")
	changed["metadata"].(map[string]any)["labels"] = map[string]any{"pool": "web"}
	testkit.PutResource(t, bus.JS, "cluster", "nodes", changed)
	testkit.DeleteResource(t, bus.JS, msg.ResourceKey("cluster", "nodes", "", "gone"))
	testkit.PutResource(t, bus.JS, "cluster", "namespaces", nodeObject("x"))
	testkit.PutResource(t, bus.JS, "other", "nodes", nodeObject("y"))

	nodes, err := o.nodes(ctx, "nodes")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("nodes %v, want [a b c]", names)
	}
	if len(nodes) > 0 && nodes[0].Labels["pool"] != "web" {
		t.Errorf("node a has labels %v, want its last value's", nodes[0].Labels)
	}
	if got, err := o.list(ctx, "deployments"); err != nil || len(got) != 0 {
		t.Errorf("an empty type: %v, %v", got, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := o.list(cancelled, "nodes"); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled list: %v, want context.Canceled, not a partial list", err)
	}
}

// BenchmarkObjectsList reads 20 and 200 Nodes from the resources bucket as
// a look at every workload does; the reference, in the same run, is the
// way it was read before: the keys listed, then a Get of each.
func BenchmarkObjectsList(b *testing.B) {
	bus := testkit.NATS(b)
	kv := resourcesBucket(b, bus)
	o := objects{kv: kv, source: "cluster"}
	ctx := context.Background()
	n := 0
	for _, nodes := range []int{20, 200} {
		for ; n < nodes; n++ {
			testkit.PutResource(b, bus.JS, "cluster", "nodes", nodeObject(fmt.Sprintf("node-%03d", n)))
		}
		b.Run(fmt.Sprintf("nodes=%d/watch", nodes), func(b *testing.B) {
			for b.Loop() {
				if got, err := o.list(ctx, "nodes"); err != nil || len(got) != nodes {
					b.Fatalf("%d objects, %v", len(got), err)
				}
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/keys-then-gets", nodes), func(b *testing.B) {
			for b.Loop() {
				if got := listByGets(b, kv, "cluster", "nodes"); len(got) != nodes {
					b.Fatalf("%d objects", len(got))
				}
			}
		})
	}
}

// listByGets lists the keys of typ, then gets and decodes each.
func listByGets(b *testing.B, kv jetstream.KeyValue, source, typ string) []map[string]any {
	ctx := context.Background()
	lister, err := kv.ListKeysFiltered(ctx, msg.ResourcePrefix(source, typ)+"*.*")
	if err != nil {
		b.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []map[string]any
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		var r msg.Resource
		if err := msg.Decode(e.Value(), &r); err != nil {
			b.Fatal(err)
		}
		out = append(out, r.Object)
	}
	return out
}
