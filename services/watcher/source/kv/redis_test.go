package kv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
)

func notifyFlags(t testing.TB, c *redis.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	return v["notify-keyspace-events"]
}

// TestRedisTypes reads hashes as key/field, ignores other types, and
// follows fields and type changes through notifications alone.
func TestRedisTypes(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	srv.do(t, "set", "/app/s", "str")
	srv.do(t, "hset", "/app/h", "f1", "v1", "f2", "v2", "sub/f", "deep")
	srv.do(t, "rpush", "/app/list", "a", "b")
	srv.do(t, "sadd", "/app/set", "a")
	srv.do(t, "set", "/apple", "not under /app")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceRedis, Address: srv.addr, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/s": "str", "/h/f1": "v1", "/h/f2": "v2", "/h/sub/f": "deep"})
	o, _ := rec.object("/h/f1")
	if o.Body["key"] != "/app/h" || o.Body["field"] != "f1" || o.Body["source"] != "redis" {
		t.Errorf("/h/f1 carries %v", o.Body)
	}
	if o, _ := rec.object("/s"); o.Body["field"] != nil {
		t.Errorf("a string value has a field: %v", o.Body)
	}

	srv.do(t, "hdel", "/app/h", "f2")
	srv.do(t, "hset", "/app/h", "f3", "v3", "f1", "v1b")
	waitValues(t, rec, map[string]string{"/s": "str", "/h/f1": "v1b", "/h/f3": "v3", "/h/sub/f": "deep"})

	// The hash becomes a string, the string a list.
	srv.do(t, "del", "/app/h")
	srv.do(t, "set", "/app/h", "now a string")
	srv.do(t, "del", "/app/s")
	srv.do(t, "rpush", "/app/s", "x")
	waitValues(t, rec, map[string]string{"/h": "now a string"})

	// Expiry and rename are followed too.
	srv.do(t, "set", "/app/tmp", "t", "px", "300")
	srv.do(t, "set", "/app/old", "o")
	srv.do(t, "rename", "/app/old", "/app/new")
	waitValues(t, rec, map[string]string{"/h": "now a string", "/new": "o"})
	if replaces, _, _, _ := rec.counts(); replaces != 1 {
		t.Errorf("%d replaces: changes were not followed by notifications alone", replaces)
	}
	if f := notifyFlags(t, srv.client); !strings.ContainsRune(f, 'K') || !strings.ContainsRune(f, 'A') {
		t.Errorf("notify-keyspace-events is %q", f)
	}
}

// TestRedisGlobPrefix uses a prefix holding glob characters, which must
// match only themselves, in SCAN and in the subscription.
func TestRedisGlobPrefix(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	srv.do(t, "set", "/my*app/a", "1")
	srv.do(t, "set", "/myXapp/b", "glob match only")
	srv.do(t, "set", "/my*app", "root")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceRedis, Address: srv.addr, Prefix: "/my*app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1", "/": "root"})
	srv.do(t, "set", "/myYapp/c", "no")
	srv.do(t, "set", "/my*app/c", "3")
	waitValues(t, rec, map[string]string{"/a": "1", "/": "root", "/c": "3"})
}

// TestRedisRestart kills the server and starts an empty one on the same
// port, with no rescan: the lost subscription is reported, re-established,
// notifications are enabled again on the new server, and everything is
// read again.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	srv.do(t, "set", "/app/a", "1")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceRedis, Address: srv.addr, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1"})

	n := rec.problemCount()
	srv.stop()
	waitProblem(t, rec, n, "redis: kv: backend unavailable: keyspace subscription")
	if got := rec.values(); got["/a"] != "1" {
		t.Errorf("values during the outage: %v", got)
	}
	srv.start()
	// The new server is empty: the re-read after the subscription is back
	// removes /a.
	waitValues(t, rec, map[string]string{})
	testkit.Eventually(t, 10*time.Second, func() error {
		if f := notifyFlags(t, srv.client); !strings.ContainsRune(f, 'K') {
			return errors.New("notifications not enabled on the new server: " + f)
		}
		return nil
	})
	srv.do(t, "set", "/app/b", "2")
	waitValues(t, rec, map[string]string{"/b": "2"})
	for _, err := range rec.problemErrors() {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("problem %v does not wrap ErrUnavailable", err)
		}
	}
}

// TestRedisNoConfig runs a server where CONFIG is disabled: the source
// reports that it cannot enable notifications and sees changes at each
// rescan.
func TestRedisNoConfig(t *testing.T) {
	t.Parallel()
	srv := startRedis(t, "--rename-command", "CONFIG", "")
	srv.do(t, "set", "/app/a", "1")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceRedis, Address: srv.addr, Prefix: "/app", Rescan: config.Duration(200 * time.Millisecond)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1"})
	p := waitProblem(t, rec, 0, "keyspace notifications cannot be enabled", "changes are read every 200ms")
	if !strings.Contains(p, "unknown command") {
		t.Errorf("problem %q does not say why", p)
	}
	srv.do(t, "set", "/app/a", "2")
	srv.do(t, "set", "/app/b", "3")
	waitValues(t, rec, map[string]string{"/a": "2", "/b": "3"})
	// The problem is reported once, not at every rescan.
	r0, _, _, _ := rec.counts()
	testkit.Eventually(t, 10*time.Second, func() error {
		if r, _, _, _ := rec.counts(); r < r0+3 {
			return errors.New("waiting for three more rescans")
		}
		return nil
	})
	count := 0
	for _, p := range rec.problemsAfter(0) {
		if strings.Contains(p, "keyspace notifications cannot be enabled") {
			count++
		}
	}
	if count != 1 {
		t.Errorf("reported %d times, want once", count)
	}
}

// TestRedisKeepsFlags adds the flags it needs to those already set: "m"
// (key misses) is not part of "A" and must stay.
func TestRedisKeepsFlags(t *testing.T) {
	t.Parallel()
	srv := startRedis(t, "--notify-keyspace-events", "Km")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceRedis, Address: srv.addr, Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitSynced(t, rec)
	f := notifyFlags(t, srv.client)
	for _, want := range "KEAm" {
		if !strings.ContainsRune(f, want) {
			t.Errorf("notify-keyspace-events %q lacks %c", f, want)
		}
	}
}

// TestRedisDatabaseAndPassword reads one database of a server that needs a
// password, and reports a wrong password without syncing.
func TestRedisDatabaseAndPassword(t *testing.T) {
	t.Parallel()
	srv := startRedis(t, "--requirepass", "s3cret")
	ctx := context.Background()
	db2 := redis.NewClient(&redis.Options{Addr: srv.addr, Password: "s3cret", DB: 2, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = db2.Close() })
	if err := db2.Set(ctx, "/a", "in db 2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.do(t, "set", "/a", "in db 0")
	environ := WithEnviron(func() []string { return []string{"GOOD=s3cret", "BAD=nope"} })
	src := config.Source{Type: config.SourceRedis, Address: srv.addr, Database: 2, PasswordEnv: "GOOD", Rescan: config.Duration(time.Hour)}
	rec := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), rec)
	waitValues(t, rec, map[string]string{"/a": "in db 2"})
	if err := db2.Set(ctx, "/b", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.do(t, "set", "/c", "db 0 again")
	waitValues(t, rec, map[string]string{"/a": "in db 2", "/b": "2"})

	src.PasswordEnv = "BAD"
	bad := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), bad)
	p := waitProblem(t, bad, 0, "redis: kv: backend unavailable")
	if !strings.Contains(p, "WRONGPASS") && !strings.Contains(p, "invalid password") {
		t.Errorf("problem %q does not say the password was refused", p)
	}
	if strings.Contains(p, "nope") {
		t.Errorf("problem %q shows the password", p)
	}
	if _, _, _, synced := bad.counts(); synced != 0 {
		t.Error("synced with a wrong password")
	}
}
