package kv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/weftio/weft/pkg/config"
)

// TestZookeeperShared runs the tests that do not stop the server on one
// server, each in a subtree of its own.
func TestZookeeperShared(t *testing.T) {
	t.Parallel()
	srv := startZooKeeper(t)
	t.Run("tree", func(t *testing.T) { t.Parallel(); testZookeeperTree(t, srv) })
	t.Run("selector created", func(t *testing.T) { t.Parallel(); testZookeeperSelectorCreated(t, srv) })
	t.Run("digest", func(t *testing.T) { t.Parallel(); testZookeeperDigest(t, srv) })
}

// testZookeeperTree follows changes that re-arm one-shot watches many
// times and move znodes between leaf and parent: a value is a znode with
// no children, as in confd.
func testZookeeperTree(t *testing.T, srv *zkServer) {
	srv.put(t, "/tree/app/a", "0")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceZookeeper, Endpoints: []string{srv.Addr}, Keys: []string{"/tree"}, Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/tree/app/a": "0"})

	// A data watch fires once; each change must arm it again.
	for i := 1; i <= 5; i++ {
		srv.put(t, "/tree/app/a", fmt.Sprint(i))
		waitValues(t, rec, map[string]string{"/tree/app/a": fmt.Sprint(i)})
	}
	// A leaf that gets a child is no longer a value; its child is.
	srv.put(t, "/tree/app/a/x", "ax")
	waitValues(t, rec, map[string]string{"/tree/app/a/x": "ax"})
	// A deep new subtree is read whole.
	srv.put(t, "/tree/app/b/c/d", "bcd")
	waitValues(t, rec, map[string]string{"/tree/app/a/x": "ax", "/tree/app/b/c/d": "bcd"})
	// A parent whose last child goes is a leaf again, with its own data.
	srv.del(t, "/tree/app/a/x")
	waitValues(t, rec, map[string]string{"/tree/app/a": "5", "/tree/app/b/c/d": "bcd"})
	// Deleting a subtree from the bottom up removes its values.
	srv.del(t, "/tree/app/b/c/d")
	srv.del(t, "/tree/app/b/c")
	srv.del(t, "/tree/app/b")
	waitValues(t, rec, map[string]string{"/tree/app/a": "5"})
	if _, _, _, synced := rec.counts(); synced != 1 {
		t.Errorf("synced %d times", synced)
	}
	if replaces, _, _, _ := rec.counts(); replaces != 1 {
		t.Errorf("%d full reads: changes must come from watches", replaces)
	}
}

// testZookeeperSelectorCreated starts with the selected znode missing: its
// creation is watched.
func testZookeeperSelectorCreated(t *testing.T, srv *zkServer) {
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceZookeeper, Endpoints: []string{srv.Addr}, Prefix: "/svc/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{})
	srv.put(t, "/svc/app/port", "8080")
	waitValues(t, rec, map[string]string{"/port": "8080"})
	srv.del(t, "/svc/app/port")
	srv.del(t, "/svc/app")
	waitValues(t, rec, map[string]string{})
	// Deleted and created again: watched again.
	srv.put(t, "/svc/app", "leaf")
	waitValues(t, rec, map[string]string{"/": "leaf"})
}

// TestZookeeperRestart kills the server and starts it again on the same
// data: the outage is reported, the last values stay, and changes made
// after the restart arrive, with no full read due.
func TestZookeeperRestart(t *testing.T) {
	t.Parallel()
	srv := startZooKeeper(t)
	srv.put(t, "/app/a", "1")
	srv.put(t, "/app/b", "2")
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceZookeeper, Endpoints: []string{srv.Addr}, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1", "/b": "2"})

	n := rec.problemCount()
	srv.Stop()
	waitProblem(t, rec, n, "zookeeper: kv: backend unavailable")
	// Reads fail, with backoff, while the server is down.
	waitProblem(t, rec, n, "zookeeper: kv: backend unavailable: read /app")
	if got := rec.values(); got["/a"] != "1" || got["/b"] != "2" {
		t.Errorf("values during the outage: %v", got)
	}
	srv.Start()
	srv.put(t, "/app/a", "1b")
	srv.del(t, "/app/b")
	srv.put(t, "/app/c", "3")
	waitValues(t, rec, map[string]string{"/a": "1b", "/c": "3"})
	// And the watches follow again.
	replaces, _, _, _ := rec.counts()
	srv.put(t, "/app/c", "3b")
	waitValues(t, rec, map[string]string{"/a": "1b", "/c": "3b"})
	if r, _, _, _ := rec.counts(); r != replaces {
		t.Errorf("a change after the restart came with a full read, not a watch")
	}
	for _, err := range rec.problemErrors() {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("problem %v does not wrap ErrUnavailable", err)
		}
	}
}

// TestZookeeperDownAtStart starts the source before the server.
func TestZookeeperDownAtStart(t *testing.T) {
	t.Parallel()
	srv := startZooKeeper(t)
	srv.put(t, "/app/a", "1")
	srv.Stop()
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceZookeeper, Endpoints: []string{srv.Addr}, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitProblem(t, rec, 0, "zookeeper: kv: backend unavailable")
	if _, _, _, synced := rec.counts(); synced != 0 {
		t.Fatal("synced with the server down")
	}
	srv.Start()
	waitValues(t, rec, map[string]string{"/a": "1"})
}

// testZookeeperDigest reads znodes that only a digest user may read, with
// the password from a file or the environment, and reports a wrong
// password without syncing and without showing it.
func testZookeeperDigest(t *testing.T, srv *zkServer) {
	srv.put(t, "/digest/open", "o")
	srv.put(t, "/digest/secret", "s", zk.DigestACL(zk.PermAll, "weft", "s3cret")...)
	passFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(passFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := WithEnviron(func() []string { return []string{"BAD=nope"} })
	src := config.Source{Type: config.SourceZookeeper, Endpoints: []string{srv.Addr}, Prefix: "/digest", Username: "weft", PasswordFile: passFile, Rescan: config.Duration(time.Hour)}

	good := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), good)
	waitValues(t, good, map[string]string{"/open": "o", "/secret": "s"})

	src.PasswordFile, src.PasswordEnv = "", "BAD"
	bad := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), bad)
	p := waitProblem(t, bad, 0, "zookeeper: kv: backend unavailable: read /digest/secret")
	if !strings.Contains(p, zk.ErrNoAuth.Error()) {
		t.Errorf("problem %q does not say access was refused", p)
	}
	if strings.Contains(p, "nope") {
		t.Errorf("problem %q shows the password", p)
	}
	if _, _, _, synced := bad.counts(); synced != 0 {
		t.Error("synced without the secret value")
	}
}

// TestZookeeperConfig checks the options New refuses.
func TestZookeeperConfig(t *testing.T) {
	t.Parallel()
	environ := WithEnviron(func() []string { return []string{"PASS=x"} })
	for _, c := range []struct {
		name string
		src  config.Source
		want string
	}{
		{"no endpoints", config.Source{}, "endpoints are required"},
		{"empty endpoint", config.Source{Endpoints: []string{" "}}, "an endpoint is empty"},
		{"password without user", config.Source{Endpoints: []string{"x:1"}, PasswordEnv: "PASS"}, "go together"},
		{"user without password", config.Source{Endpoints: []string{"x:1"}, Username: "u"}, "go together"},
		{"unset variable", config.Source{Endpoints: []string{"x:1"}, Username: "u", PasswordEnv: "NOPE"}, "the variable NOPE is not set"},
		{"missing file", config.Source{Endpoints: []string{"x:1"}, Username: "u", PasswordFile: "/nonexistent/p"}, "password_file: open /nonexistent/p"},
		{"env and file", config.Source{Endpoints: []string{"x:1"}, Username: "u", PasswordEnv: "PASS", PasswordFile: "/p"}, "exclude each other"},
		{"colon in user", config.Source{Endpoints: []string{"x:1"}, Username: "a:b", PasswordEnv: "PASS"}, "cannot hold ':'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.src.Type = config.SourceZookeeper
			_, err := New(c.src, environ)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want ErrConfig saying %q", err, c.want)
			}
		})
	}
}
