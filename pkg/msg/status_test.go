package msg_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// TestReadPulls lists the pulls of a real weft-pulls bucket that are not
// done, in namespace, name and node order, skipping what does not decode.
func TestReadPulls(t *testing.T) {
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := msg.ReadPulls(ctx, kv); err != nil || len(got) != 0 {
		t.Fatalf("empty bucket: %v, %v", got, err)
	}
	put := func(ns, name, node string, phase msg.PullPhase) {
		s := msg.PullStatus{Namespace: ns, Name: name, UID: "u-" + name, Node: node, Phase: phase,
			Images: []msg.ImagePull{{Image: "r.example/a:1", Phase: phase}}}
		data, err := msg.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, msg.PullStatusKey(ns, name, node), data); err != nil {
			t.Fatal(err)
		}
	}
	put("shop", "web", "n2", msg.PullPulling)
	put("shop", "web", "n1", msg.PullFailed)
	put("shop", "api", "n1", msg.PullPulled)
	put("a", "db", "n3", msg.PullPending)
	if _, err := kv.Put(ctx, "shop.broken.n1", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	got, err := msg.ReadPulls(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/db/n3 Pending", "shop/web/n1 Failed", "shop/web/n2 Pulling"}
	if len(got) != len(want) {
		t.Fatalf("got %d pulls %+v, want %v", len(got), got, want)
	}
	for i, p := range got {
		if s := p.Namespace + "/" + p.Name + "/" + p.Node + " " + string(p.Phase); s != want[i] {
			t.Errorf("pull %d = %s, want %s", i, s, want[i])
		}
	}
}
