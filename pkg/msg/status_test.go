package msg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
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

// TestStoreStatusWhoseAnswerWasLost: on a 3-node cluster (R3 buckets), a
// status write that landed but went unanswered is done, with the
// revision it landed at; one that did not land, and one refused because
// another writer came first, are errors.
func TestStoreStatusWhoseAnswerWasLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	bus := c.Bus(t, 1)
	c.Provision(t, bus)
	ctx := context.Background()
	kv, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	st := func(v uint64) msg.ValidationStatus { return msg.ValidationStatus{Target: "edge", Version: v} }
	read := func(key string) (uint64, uint64) {
		t.Helper()
		var got msg.ValidationStatus
		rev, err := msg.LoadStatus(ctx, kv, key, &got)
		if err != nil {
			t.Fatal(err)
		}
		return rev, got.Version
	}

	// Created, unanswered: done.
	rev, err := msg.StoreStatus(ctx, &testkit.LostAnswers{KeyValue: kv, Land: true, Lose: 1}, "created", st(1), 0)
	if at, v := read("created"); err != nil || rev != at || v != 1 {
		t.Fatalf("create that landed unanswered = %d, %v; the key is at %d with v%d", rev, err, at, v)
	}
	// Updated, unanswered: done.
	rev, err = msg.StoreStatus(ctx, &testkit.LostAnswers{KeyValue: kv, Land: true, Lose: 1}, "created", st(2), rev)
	if at, v := read("created"); err != nil || rev != at || v != 2 {
		t.Fatalf("update that landed unanswered = %d, %v; the key is at %d with v%d", rev, err, at, v)
	}
	// Not landed, unanswered: an error, the key as it was.
	if _, err := msg.StoreStatus(ctx, &testkit.LostAnswers{KeyValue: kv, Lose: 1}, "created", st(3), rev); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("update that did not land = %v, want the timeout", err)
	}
	if _, v := read("created"); v != 2 {
		t.Fatalf("the key holds v%d, want v2", v)
	}
	// Refused: another writer came first, even with the same content.
	if _, err := msg.StoreStatus(ctx, kv, "created", st(2), rev-1); err == nil {
		t.Fatal("an update at a stale revision succeeded")
	}
}
