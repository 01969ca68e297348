package kv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/testkit"
)

func newBucket(t testing.TB, js jetstream.JetStream, name string) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func kvPut(t testing.TB, kv jetstream.KeyValue, key, value string) {
	t.Helper()
	if _, err := kv.PutString(context.Background(), key, value); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// TestNATSKeyMapping reads escaped keys and reports keys that are not the
// encoding of a path, at sync and afterwards.
func TestNATSKeyMapping(t *testing.T) {
	t.Parallel()
	bus := testkit.NATS(t)
	kv := newBucket(t, bus.JS, "cfg")
	kvPut(t, kv, "web.host=20name.a=2Eb", "escaped")
	kvPut(t, kv, "web.plain", "p")
	kvPut(t, kv, "web/x", "slash")
	kvPut(t, kv, "web.=41", "needless escape")
	kvPut(t, kv, "other.x", "outside")

	rec := newRecorder(t)
	src := config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Rescan: config.Duration(time.Hour)}
	start(t, mustNew(t, src, opts(WithNATSConn(bus.NC))...), rec)
	waitValues(t, rec, map[string]string{"/web/host name/a.b": "escaped", "/web/plain": "p", "/other/x": "outside"})
	o, _ := rec.object("/web/host name/a.b")
	if o.Body["key"] != "web.host=20name.a=2Eb" {
		t.Errorf("key %v", o.Body["key"])
	}
	problems := strings.Join(rec.syncedProblems(), "\n")
	for _, want := range []string{
		`key "web/x" is not a path`, `(the path /web/x is the key "web.x")`,
		`key "web.=41" is not a path`, `"=41" needs no escape`,
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("synced problems %q lack %q", problems, want)
		}
	}
	if n := len(rec.syncedProblems()); n != 2 {
		t.Errorf("%d synced problems, want 2: %q", n, problems)
	}

	n := rec.problemCount()
	kvPut(t, kv, "web.bad=2f", "x")
	p := waitProblem(t, rec, n, `key "web.bad=2f" is not a path`)
	if !strings.Contains(p, "upper-case hex") {
		t.Errorf("problem %q does not say why", p)
	}
	for _, err := range rec.problemErrors() {
		if !errors.Is(err, ErrInvalidData) {
			t.Errorf("problem %v does not wrap ErrInvalidData", err)
		}
	}
}

// TestNATSPurge follows a purge like a delete.
func TestNATSPurge(t *testing.T) {
	t.Parallel()
	bus := testkit.NATS(t)
	kv := newBucket(t, bus.JS, "cfg")
	kvPut(t, kv, "a.b", "1")
	kvPut(t, kv, "a.c", "2")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Rescan: config.Duration(time.Hour)}, opts(WithNATSConn(bus.NC))...), rec)
	waitValues(t, rec, map[string]string{"/a/b": "1", "/a/c": "2"})
	if err := kv.Purge(context.Background(), "a.b"); err != nil {
		t.Fatal(err)
	}
	waitValues(t, rec, map[string]string{"/a/c": "2"})
}

// TestNATSBucketMissing starts before the bucket exists: the source
// reports it, keeps trying and syncs once the bucket is there.
func TestNATSBucketMissing(t *testing.T) {
	t.Parallel()
	bus := testkit.NATS(t)
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceNATSKV, Bucket: "later"}, opts(WithNATSConn(bus.NC))...), rec)
	p := waitProblem(t, rec, 0, "bucket later")
	if !strings.Contains(p, "bucket not found") {
		t.Errorf("problem %q does not say the bucket is missing", p)
	}
	if _, _, _, synced := rec.counts(); synced != 0 {
		t.Fatal("synced without a bucket")
	}
	kv := newBucket(t, bus.JS, "later")
	kvPut(t, kv, "x", "1")
	waitValues(t, rec, map[string]string{"/x": "1"})
}

// TestNATSRestart runs its own server, stops it and starts it again on
// the same port and storage: the source, which dials the address itself,
// reports the outage and reads everything again once the server is back.
func TestNATSRestart(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	storeDir := t.TempDir()
	var (
		mu  sync.Mutex
		srv = startNATS(t, port, storeDir)
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	url := srv.ClientURL()
	kv := natsBucket(t, url, "cfg")
	kvPut(t, kv, "app.a", "1")

	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Address: url, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1"})

	n := rec.problemCount()
	mu.Lock()
	srv.Shutdown()
	srv.WaitForShutdown()
	mu.Unlock()
	p := waitProblem(t, rec, n, "natskv", "bucket cfg")
	if !strings.Contains(p, "disconnect") {
		t.Errorf("problem %q does not say the connection was lost", p)
	}
	if got := rec.values(); got["/a"] != "1" {
		t.Errorf("values during the outage: %v", got)
	}

	mu.Lock()
	srv = startNATS(t, port, storeDir)
	mu.Unlock()
	kv = natsBucket(t, url, "cfg")
	kvPut(t, kv, "app.b", "2")
	kvPut(t, kv, "app.a", "1b")
	waitValues(t, rec, map[string]string{"/a": "1b", "/b": "2"})
	for _, err := range rec.problemErrors() {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("problem %v does not wrap ErrUnavailable", err)
		}
	}
}

func startNATS(t testing.TB, port int, storeDir string) interface {
	Shutdown()
	WaitForShutdown()
	ClientURL() string
} {
	t.Helper()
	s, err := embedded.Start(embedded.Options{Port: port, StoreDir: storeDir, Name: "kvtest"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// natsBucket connects a test client to url and opens (or creates) bucket.
func natsBucket(t testing.TB, url, bucket string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestSinkErrors makes the sink fail a Replace and later an Upsert: each
// failure is a problem, and the source reads everything again until the
// sink holds the truth.
func TestSinkErrors(t *testing.T) {
	t.Parallel()
	bus := testkit.NATS(t)
	kv := newBucket(t, bus.JS, "cfg")
	kvPut(t, kv, "a", "1")
	rec := newRecorder(t)
	var mu sync.Mutex
	failures := map[string]int{"replace": 1}
	rec.fail = func(op string) error {
		mu.Lock()
		defer mu.Unlock()
		if failures[op] > 0 {
			failures[op]--
			return errors.New("store unavailable")
		}
		return nil
	}
	start(t, mustNew(t, config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Rescan: config.Duration(time.Hour)}, opts(WithNATSConn(bus.NC))...), rec)
	waitValues(t, rec, map[string]string{"/a": "1"})
	waitProblem(t, rec, 0, "replace: store unavailable")

	n := rec.problemCount()
	mu.Lock()
	failures["upsert"] = 1
	mu.Unlock()
	kvPut(t, kv, "b", "2")
	waitProblem(t, rec, n, `upsert "/b": store unavailable`)
	waitValues(t, rec, map[string]string{"/a": "1", "/b": "2"})
	if replaces, _, _, synced := rec.counts(); replaces < 2 || synced != 1 {
		t.Errorf("replaces %d synced %d: want a re-read after the failed upsert and one sync", replaces, synced)
	}
}

// TestNATSBurstKeepsOrder: a burst of puts and deletes of the same keys,
// stored together, ends as the bucket does: a value put and then deleted
// is gone, one deleted and then put is there with its last value.
func TestNATSBurstKeepsOrder(t *testing.T) {
	t.Parallel()
	bus := testkit.NATS(t)
	kv := newBucket(t, bus.JS, "cfg")
	kvPut(t, kv, "a.keep", "0")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Rescan: config.Duration(time.Hour)}, opts(WithNATSConn(bus.NC))...), rec)
	waitValues(t, rec, map[string]string{"/a/keep": "0"})
	ctx := context.Background()
	for i := range 50 {
		kvPut(t, kv, "a.gone", fmt.Sprint(i))
		kvPut(t, kv, "a.back", fmt.Sprint(i))
		if err := kv.Delete(ctx, "a.gone"); err != nil {
			t.Fatal(err)
		}
		if i < 49 {
			if err := kv.Delete(ctx, "a.back"); err != nil {
				t.Fatal(err)
			}
		}
		kvPut(t, kv, "a.keep", fmt.Sprint(i))
	}
	waitValues(t, rec, map[string]string{"/a/keep": "49", "/a/back": "49"})
}
