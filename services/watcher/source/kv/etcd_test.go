package kv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftio/weft/pkg/config"
)

// putMany writes keys in transactions of at most 100 operations.
func putMany(t testing.TB, c *clientv3.Client, kvs map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ops := make([]clientv3.Op, 0, 100)
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for k, v := range kvs {
		ops = append(ops, clientv3.OpPut(k, v))
		if len(ops) == 100 {
			flush()
		}
	}
	flush()
}

// TestEtcdPaging reads more keys than one Get returns.
func TestEtcdPaging(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	want := map[string]string{}
	data := map[string]string{"/app0/x": "outside"}
	for i := range 2*etcdPage + 17 {
		k := fmt.Sprintf("/app/k%05d", i)
		data[k] = fmt.Sprint(i)
		want[fmt.Sprintf("/k%05d", i)] = fmt.Sprint(i)
	}
	putMany(t, srv.client, data)
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app"}, fast...), rec)
	waitValues(t, rec, want)
}

// TestEtcdCompaction makes the watch start behind a compaction: writes and
// a compaction happen between the read and the watch, so the watch is
// refused and everything is read again, with nothing lost.
func TestEtcdCompaction(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	srv.put(t, "/app/a", "1")
	s := mustNew(t, config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...).(*etcdSource)
	var calls atomic.Int32
	s.afterList = func() {
		if calls.Add(1) != 1 {
			return
		}
		// This runs on the source's goroutine: no t.Fatal here.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := srv.client.Put(ctx, "/app/a", "2"); err != nil {
			t.Error(err)
			return
		}
		resp, err := srv.client.Put(ctx, "/app/b", "3")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := srv.client.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Error(err)
		}
	}
	rec := newRecorder(t)
	start(t, s, rec)
	waitValues(t, rec, map[string]string{"/a": "2", "/b": "3"})
	if n := calls.Load(); n < 2 {
		t.Errorf("%d full reads, want a second one after the compaction", n)
	}
	// The watch that follows the second read works.
	srv.put(t, "/app/c", "4")
	waitValues(t, rec, map[string]string{"/a": "2", "/b": "3", "/c": "4"})
}

// TestEtcdRestart kills the server and starts it again on the same data:
// the outage is reported, the last values stay, and changes made after the
// restart arrive.
func TestEtcdRestart(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	srv.put(t, "/app/a", "1")
	srv.put(t, "/app/b", "2")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app", Rescan: config.Duration(200 * time.Millisecond)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1", "/b": "2"})

	n := rec.problemCount()
	srv.stop()
	waitProblem(t, rec, n, "etcd: kv: backend unavailable: read /app")
	if got := rec.values(); got["/a"] != "1" || got["/b"] != "2" {
		t.Errorf("values during the outage: %v", got)
	}
	srv.start()
	srv.put(t, "/app/a", "1b")
	srv.del(t, "/app/b")
	waitValues(t, rec, map[string]string{"/a": "1b"})
	for _, err := range rec.problemErrors() {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("problem %v does not wrap ErrUnavailable", err)
		}
	}
}

// TestEtcdLostBeforeTheWatch kills the server after a full read, before
// the source asks for its watch: the outage is reported at the next full
// read, and the changes made once the server is back arrive.
func TestEtcdLostBeforeTheWatch(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	srv.put(t, "/app/a", "1")
	s := mustNew(t, config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app", Rescan: config.Duration(200 * time.Millisecond)}, fast...).(*etcdSource)
	var lists atomic.Int32
	s.afterList = func() {
		if lists.Add(1) == 1 {
			srv.stop()
		}
	}
	rec := newRecorder(t)
	start(t, s, rec)
	waitValues(t, rec, map[string]string{"/a": "1"})
	waitProblem(t, rec, 0, "etcd: kv: backend unavailable: read /app")
	srv.start()
	srv.put(t, "/app/a", "2")
	waitValues(t, rec, map[string]string{"/a": "2"})
}

// TestEtcdDownAtStart starts the source before the server.
func TestEtcdDownAtStart(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	srv.put(t, "/app/a", "1")
	srv.stop()
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app", Rescan: config.Duration(time.Second)}, fast...), rec)
	waitProblem(t, rec, 0, "etcd: kv: backend unavailable")
	if _, _, _, synced := rec.counts(); synced != 0 {
		t.Fatal("synced with the server down")
	}
	srv.start()
	waitValues(t, rec, map[string]string{"/a": "1"})
}

// TestEtcdAuth reads with a user and password, and reports a wrong
// password without syncing.
func TestEtcdAuth(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	srv.put(t, "/app/a", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := srv.client.RoleAdd(ctx, "root"); return err },
		func() error { _, err := srv.client.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := srv.client.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := srv.client.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	environ := WithEnviron(func() []string { return []string{"GOOD=s3cret", "BAD=nope"} })
	src := config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app", Username: "root", PasswordEnv: "GOOD"}

	good := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), good)
	waitValues(t, good, map[string]string{"/a": "1"})

	src.PasswordEnv = "BAD"
	bad := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), bad)
	p := waitProblem(t, bad, 0, "etcd: kv: backend unavailable: connect")
	if !strings.Contains(p, "authentication failed") {
		t.Errorf("problem %q does not say the password was refused", p)
	}
	if strings.Contains(p, "nope") {
		t.Errorf("problem %q shows the password", p)
	}
	if _, _, _, synced := bad.counts(); synced != 0 {
		t.Error("synced with a wrong password")
	}
}
