package msg_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

func jetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
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

// unanswered is a real JetStream whose first requests for each stream,
// bucket or store are never answered: they hang until their context ends,
// as a request lost near a NATS node restart does.
type unanswered struct {
	jetstream.JetStream
	mu    sync.Mutex
	drops map[string]int // how many requests to drop, per name
	tries map[string]int
}

func (u *unanswered) drop(ctx context.Context, name string) error {
	u.mu.Lock()
	u.tries[name]++
	n := u.drops[name]
	if n > 0 {
		u.drops[name] = n - 1
	}
	u.mu.Unlock()
	if n > 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (u *unanswered) CreateOrUpdateStream(ctx context.Context, c jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := u.drop(ctx, c.Name); err != nil {
		return nil, err
	}
	return u.JetStream.CreateOrUpdateStream(ctx, c)
}

// TestProvisionRetriesUnansweredRequests: every creation's first two
// requests go unanswered; Provision retries each with its own timeout and
// creates everything within the caller's budget.
func TestProvisionRetriesUnansweredRequests(t *testing.T) {
	u := &unanswered{JetStream: jetStream(t), drops: map[string]int{}, tries: map[string]int{}}
	var names []string
	for _, c := range msg.Streams(1) {
		names = append(names, c.Name)
	}
	for _, c := range msg.KeyValues(1) {
		names = append(names, msg.KVStream(c.Bucket))
	}
	for _, c := range msg.ObjectStores(1) {
		names = append(names, "OBJ_"+c.Bucket)
	}
	for _, n := range names {
		u.drops[n] = 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, u, 1, msg.WithCallTimeout(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if u.tries[n] != 3 {
			t.Errorf("%s: %d requests, want 3", n, u.tries[n])
		}
	}
	for _, c := range msg.Streams(1) {
		if _, err := u.Stream(ctx, c.Name); err != nil {
			t.Errorf("stream %s: %v", c.Name, err)
		}
	}
	for _, c := range msg.KeyValues(1) {
		if _, err := u.KeyValue(ctx, c.Bucket); err != nil {
			t.Errorf("bucket %s: %v", c.Bucket, err)
		}
	}
}

func TestProvisionErrors(t *testing.T) {
	tests := []struct {
		name     string
		replicas int
		opts     []msg.ProvisionOption
		budget   time.Duration
		want     string
	}{
		// A single server cannot hold 3 replicas: JetStream says so at
		// once, and Provision does not retry it until the budget ends.
		{"replicas on a single server", 3, nil, time.Minute, "replicas > 1 not supported in non-clustered mode"},
		{"no replicas", 0, nil, time.Minute, "replicas must be >= 1"},
		{"bad call timeout", 1, []msg.ProvisionOption{msg.WithCallTimeout(0)}, time.Minute, "call timeout must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := jetStream(t)
			ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
			defer cancel()
			err := msg.Provision(ctx, js, tc.replicas, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				t.Fatalf("a final error was retried until the budget ended: %v", err)
			}
		})
	}
}

// TestProvisionGivesUpWithTheLastError: a JetStream that never answers
// makes Provision return when the caller's budget ends, naming what it
// could not create and how often it tried.
func TestProvisionGivesUpWithTheLastError(t *testing.T) {
	u := &unanswered{JetStream: jetStream(t), drops: map[string]int{}, tries: map[string]int{}}
	u.drops[msg.StreamChanges] = 1 << 30
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := msg.Provision(ctx, u, 1, msg.WithCallTimeout(200*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "stream "+msg.StreamChanges+": ") || !strings.Contains(err.Error(), "tries, the last") {
		t.Fatalf("err = %v", err)
	}
}

// TestOpenStoppedWhileUnanswered: a service stopped while its tries go
// unanswered returns an error that is its context's (a stop, not a
// failure), still naming the last try's; a budget that runs out is the
// deadline's.
func TestOpenStoppedWhileUnanswered(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"stopped", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"budget", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			unanswered := errors.New("nats: timeout")
			err := msg.Open(ctx, "svc: buckets", func(context.Context) error { return unanswered })
			if !errors.Is(err, tc.want) || !errors.Is(err, unanswered) || !strings.Contains(err.Error(), "svc: buckets: ") {
				t.Fatalf("err = %v, want one wrapping %v and the last try's error", err, tc.want)
			}
		})
	}
}

// failingFirst is a real bucket whose first watch fails after the client
// has taken the keys, as a watch asked while a NATS node is lost does.
type failingFirst struct {
	jetstream.KeyValue
	tries int
}

func (f *failingFirst) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if f.tries++; f.tries == 1 {
		gone, cancel := context.WithCancel(ctx)
		cancel()
		if w, err := f.KeyValue.WatchFiltered(gone, keys, opts...); err == nil {
			_ = w.Stop()
		}
		return nil, errors.New("no responders")
	}
	return f.KeyValue.WatchFiltered(ctx, keys, opts...)
}

// TestWatchAgainAfterAFailedTry: the try after a failed watch asks for the
// same keys and gets their values.
func TestWatchAgainAfterAFailedTry(t *testing.T) {
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "pin.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	f := &failingFirst{KeyValue: kv}
	keys := []string{"pin.*"}
	w, err := msg.Watch(ctx, f, keys)
	if err != nil {
		t.Fatalf("watch after a failed try: %v (tries %d)", err, f.tries)
	}
	defer func() { _ = w.Stop() }()
	if f.tries != 2 || keys[0] != "pin.*" {
		t.Fatalf("tries %d, keys %q: want 2 tries and the caller's keys as given", f.tries, keys)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "pin.a" {
			t.Fatalf("first update %v, want pin.a", e)
		}
	case <-ctx.Done():
		t.Fatal("no update")
	}
}

func TestIsWrongLastSequence(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("update: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: "wrong last sequence"})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"single server", api(10071), true},
		{"replicated stream", api(10164), true},
		{"another API error", api(10058), false},
		{"a timeout", context.DeadlineExceeded, false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		if got := msg.IsWrongLastSequence(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProvisionedStoresReadFromTheLeader: every bucket and object store is
// provisioned without direct gets (reads go to the stream leader, which
// has applied every acknowledged write), also one that an earlier weft
// made with nats.go's defaults, and each still works as a bucket or store.
func TestProvisionedStoresReadFromTheLeader(t *testing.T) {
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Buckets and the store as an earlier weft made them, with nats.go's
	// defaults: direct gets allowed, no per-key TTLs. Provision updates
	// them in place.
	for _, c := range msg.KeyValues(1) {
		c.LimitMarkerTTL = 0
		if _, err := js.CreateKeyValue(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range msg.ObjectStores(1) {
		if _, err := js.CreateObjectStore(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := msg.Provision(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range msg.KeyValues(1) {
		s, err := js.Stream(ctx, msg.KVStream(c.Bucket))
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Errorf("bucket %s allows direct gets", c.Bucket)
		}
		if got := s.CachedInfo().Config; c.LimitMarkerTTL > 0 && (!got.AllowMsgTTL || got.SubjectDeleteMarkerTTL != c.LimitMarkerTTL) {
			t.Errorf("bucket %s: per-key TTLs %v, delete markers kept %v; want allowed, %v", c.Bucket, got.AllowMsgTTL, got.SubjectDeleteMarkerTTL, c.LimitMarkerTTL)
		}
		kv, err := js.KeyValue(ctx, c.Bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", c.Bucket, err)
		}
		rev, err := kv.Create(ctx, "k", []byte("1"))
		if err != nil {
			t.Fatalf("bucket %s: create: %v", c.Bucket, err)
		}
		if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
			t.Fatalf("bucket %s: update: %v", c.Bucket, err)
		}
		if _, err := kv.Update(ctx, "k", []byte("3"), rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !msg.IsWrongLastSequence(err) {
			t.Fatalf("bucket %s: stale update: %v, want a conflict", c.Bucket, err)
		}
		if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "2" {
			t.Fatalf("bucket %s: get: %v %v", c.Bucket, e, err)
		}
		if err := kv.Delete(ctx, "k"); err != nil {
			t.Fatalf("bucket %s: delete: %v", c.Bucket, err)
		}
		if _, err := kv.Get(ctx, "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("bucket %s: get after delete: %v", c.Bucket, err)
		}
		if s, err := kv.Status(ctx); err != nil || s.History() != int64(max(c.History, 1)) || s.TTL() != c.TTL {
			t.Fatalf("bucket %s: status %v %v", c.Bucket, s, err)
		}
	}
	for _, c := range msg.ObjectStores(1) {
		s, err := js.Stream(ctx, "OBJ_"+c.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Errorf("object store %s allows direct gets", c.Bucket)
		}
		os, err := js.ObjectStore(ctx, c.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.PutBytes(ctx, "b", []byte("bundle")); err != nil {
			t.Fatal(err)
		}
		if b, err := os.GetBytes(ctx, "b"); err != nil || string(b) != "bundle" {
			t.Fatalf("object store %s: %q %v", c.Bucket, b, err)
		}
		if _, err := os.GetBytes(ctx, "missing"); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("object store %s: missing object: %v", c.Bucket, err)
		}
	}
}

// TestStopWatchFreesTheDeliveringGoroutine: a watcher whose reader stopped
// reading with more entries due than its channel holds leaves the client's
// delivering goroutine blocked for good after its own Stop; StopWatch
// frees it.
func TestStopWatchFreesTheDeliveringGoroutine(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 600 { // beyond the client's 256 entries of channel
		if _, err := kv.Put(ctx, fmt.Sprintf("k.%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	delivering := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "jetstream.(*kvs).WatchFiltered.func1")
	}
	for _, tc := range []struct {
		name string
		stop func(jetstream.KeyWatcher)
		left int // delivering goroutines left behind
	}{
		{"its own Stop", func(w jetstream.KeyWatcher) { _ = w.Stop() }, 1},
		{"StopWatch", msg.StopWatch, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := delivering()
			w, err := msg.Watch(ctx, kv, []string{"k.>"})
			if err != nil {
				t.Fatal(err)
			}
			// Nothing is read: the channel fills and the client blocks
			// handing over the next entry.
			blocked := func() bool { return len(w.Updates()) == cap(w.Updates()) && delivering() > before }
			deadline := time.Now().Add(10 * time.Second)
			for !blocked() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !blocked() {
				t.Fatalf("the client never blocked delivering (%d of %d entries waiting)", len(w.Updates()), cap(w.Updates()))
			}
			tc.stop(w)
			time.Sleep(200 * time.Millisecond)
			if got := delivering() - before; got != tc.left {
				t.Fatalf("%d delivering goroutines left, want %d", got, tc.left)
			}
		})
	}
}
