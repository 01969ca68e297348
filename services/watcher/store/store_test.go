package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/watcher/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

// flaky publishes through the real bucket stream but fails the delete
// markers while failing is set, as a connection lost mid-write does.
type flaky struct {
	js      jetstream.JetStream
	failing atomic.Bool
}

var errLost = errors.New("connection lost")

func (f *flaky) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if f.failing.Load() && m.Header.Get(msg.HeaderKVOperation) != "" {
		return nil, errLost
	}
	return f.js.PublishMsg(ctx, m, opts...)
}

type rig struct {
	t      *testing.T
	kv     jetstream.KeyValue
	stream jetstream.Stream
	bus    *testkit.Bus
}

func newRig(t *testing.T) *rig {
	bus := testkit.NATS(t)
	ctx := context.Background()
	kv, err := bus.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := bus.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, kv: kv, stream: stream, bus: bus}
}

func (r *rig) store(pub store.Publisher) *store.Store {
	s, err := store.New("m", []string{"services"}, nil, r.kv, r.stream, pub)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rig) live(name string) bool {
	r.t.Helper()
	_, err := r.kv.Get(context.Background(), msg.ResourceKey("m", "services", "default", name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return true
}

func svc(name string, port int) store.Object {
	return store.Object{Type: "services", Namespace: "default", Name: name, Body: map[string]any{"spec": map[string]any{"port": port}}}
}

// TestFailedDeleteIsRetried: a delete whose write failed is written by the
// next Apply; the object does not stay in the bucket for good.
func TestFailedDeleteIsRetried(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	pub := &flaky{js: r.bus.JS}
	s := r.store(pub)
	if _, err := s.Apply(ctx, []store.Object{svc("web", 80)}, true); err != nil {
		t.Fatal(err)
	}
	pub.failing.Store(true)
	if _, err := s.Apply(ctx, nil, false); !errors.Is(err, errLost) {
		t.Fatalf("Apply with a failing write: %v, want the write's error", err)
	}
	pub.failing.Store(false)
	res, err := s.Apply(ctx, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 1 || r.live("web") {
		t.Fatalf("after the failed delete: %+v, web still in the bucket: %v", res, r.live("web"))
	}
}

// TestDeleteAfterConflictIsRetried: a delete that loses a compare-and-set
// to another replica's write of the key re-reads it, so the next Apply
// deletes what is there now.
func TestDeleteAfterConflictIsRetried(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a, b := r.store(r.bus.JS), r.store(r.bus.JS)
	if _, err := a.Apply(ctx, []store.Object{svc("web", 80)}, true); err != nil {
		t.Fatal(err)
	}
	// Replica b rewrites web behind a's back.
	if _, err := b.Apply(ctx, []store.Object{svc("web", 81)}, false); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Apply(ctx, nil, false); err != nil || res.Deleted != 0 {
		t.Fatalf("conflicting delete: %+v %v", res, err)
	}
	if res, err := a.Apply(ctx, nil, false); err != nil || res.Deleted != 1 || r.live("web") {
		t.Fatalf("next Apply: %+v %v, web still in the bucket: %v", res, err, r.live("web"))
	}
}

// TestRecreateAfterDelete: an object deleted and created again right
// away is in the bucket, once, with the new content.
func TestRecreateAfterDelete(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	s := r.store(r.bus.JS)
	for _, objs := range [][]store.Object{{svc("web", 80)}, nil, {svc("web", 80)}} {
		if _, err := s.Apply(ctx, objs, false); err != nil {
			t.Fatal(err)
		}
	}
	if !r.live("web") {
		t.Fatal("re-created web not in the bucket")
	}
}

// TestPipelinedApplyDecidesConflicts: an Apply whose writes are pipelined
// and lose compare-and-sets to another replica re-reads those keys and
// decides again, as one write at a time does: a key the other replica
// wrote with the same content is left, one with other content is written.
func TestPipelinedApplyDecidesConflicts(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a, b := r.store(r.bus.JS), r.store(r.bus.JS)
	if _, ok := any(r.bus.JS).(store.AsyncPublisher); !ok {
		t.Fatal("jetstream.JetStream does not publish asynchronously")
	}
	if _, err := a.Apply(ctx, nil, true); err != nil { // a reads the empty bucket
		t.Fatal(err)
	}
	var theirs []store.Object
	for i := range 10 {
		port := 81
		if i >= 5 {
			port = 82
		}
		theirs = append(theirs, svc(fmt.Sprintf("web-%04d", i), port))
	}
	if _, err := b.Apply(ctx, theirs, true); err != nil {
		t.Fatal(err)
	}
	const n = 3 * store.Window
	var ours []store.Object
	for i := range n {
		port := 80
		if i < 5 {
			port = 81 // what b wrote
		}
		ours = append(ours, svc(fmt.Sprintf("web-%04d", i), port))
	}
	res, err := a.Apply(ctx, ours, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Put != n-5 || res.Unchanged != 5 {
		t.Fatalf("Apply = %+v, want %d put and 5 unchanged", res, n-5)
	}
	for i := range n {
		e, err := r.kv.Get(ctx, msg.ResourceKey("m", "services", "default", fmt.Sprintf("web-%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		var got msg.Resource
		if err := msg.Decode(e.Value(), &got); err != nil {
			t.Fatal(err)
		}
		want := ours[i].Body["spec"].(map[string]any)["port"]
		if p := got.Object["spec"].(map[string]any)["port"]; fmt.Sprint(p) != fmt.Sprint(want) {
			t.Errorf("web-%04d: port %v, want %v", i, p, want)
		}
	}
	if a.Count("services") != n {
		t.Errorf("Count = %d, want %d", a.Count("services"), n)
	}
	// Nothing left to write: a second Apply changes nothing.
	if res, err := a.Apply(ctx, ours, false); err != nil || res.Put != 0 || res.Unchanged != n {
		t.Fatalf("second Apply = %+v, %v", res, err)
	}
}

// syncOnly hides the asynchronous publish of a JetStream context: the
// store writes one object at a time.
type syncOnly struct{ js jetstream.JetStream }

func (s syncOnly) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return s.js.PublishMsg(ctx, m, opts...)
}

// BenchmarkApplyInitial writes a first listing of 10,000 objects into an
// empty bucket: pipelined, and one compare-and-set round trip at a time as
// the reference, in the same run.
func BenchmarkApplyInitial(b *testing.B) {
	const n = 10_000
	objs := make([]store.Object, n)
	for i := range objs {
		objs[i] = store.Object{Type: "services", Namespace: "default", Name: fmt.Sprintf("web-%05d", i), Body: map[string]any{
			"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": fmt.Sprintf("web-%05d", i), "namespace": "default"},
			"spec": map[string]any{"ports": []any{map[string]any{"port": 80, "targetPort": 8080}}},
		}}
	}
	for _, mode := range []string{"pipelined", "one-at-a-time"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				bus := testkit.NATS(b)
				ctx := context.Background()
				kv, err := bus.JS.KeyValue(ctx, msg.BucketResources)
				if err != nil {
					b.Fatal(err)
				}
				stream, err := bus.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
				if err != nil {
					b.Fatal(err)
				}
				var pub store.Publisher = bus.JS
				if mode == "one-at-a-time" {
					pub = syncOnly{bus.JS}
				}
				s, err := store.New("m", []string{"services"}, nil, kv, stream, pub)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := s.Apply(ctx, objs, true)
				if err != nil || res.Put != n {
					b.Fatalf("Apply = %+v, %v", res, err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
		})
	}
}

// TestWriteCarriesHashHeaders: a write names its hash and resource version
// in headers, the same as its value holds, for readers that need no more.
func TestWriteCarriesHashHeaders(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	o := svc("a", 1)
	o.ResourceVersion = "42"
	for _, pipelined := range []bool{true, false} {
		var pub store.Publisher = r.bus.JS
		if !pipelined {
			pub = syncOnly{r.bus.JS}
		}
		o.Body["spec"] = map[string]any{"port": map[bool]int{true: 1, false: 2}[pipelined]}
		if _, err := r.store(pub).Apply(ctx, []store.Object{o}, false); err != nil {
			t.Fatal(err)
		}
		m, err := r.stream.GetLastMsgForSubject(ctx, msg.ResourceSubject(msg.ResourceKey("m", "services", "default", "a")))
		if err != nil {
			t.Fatal(err)
		}
		var res msg.Resource
		if err := msg.Decode(m.Data, &res); err != nil {
			t.Fatal(err)
		}
		if h, v := m.Header.Get(msg.HeaderResourceHash), m.Header.Get(msg.HeaderResourceVersion); h != res.Hash || h == "" || v != "42" {
			t.Errorf("pipelined %v: headers hash %q version %q, value hash %q version 42", pipelined, h, v, res.Hash)
		}
	}
}
