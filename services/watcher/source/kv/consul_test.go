package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
)

func consulPut(t testing.TB, srv *testkit.Consul, key, value string) {
	t.Helper()
	srv.MustDo(t, "PUT", "/v1/kv/"+key, []byte(value))
}

// TestConsulRestart kills the agent and starts it again: the outage is
// reported, the last values stay meanwhile, and what the agent holds after
// the restart arrives (a -dev agent starts empty).
func TestConsulRestart(t *testing.T) {
	t.Parallel()
	srv := testkit.StartConsul(t)
	consulPut(t, srv, "app/a", "1")
	consulPut(t, srv, "app/b", "2")
	consulPut(t, srv, "app/dir/", "") // a folder, as Consul's UI makes them
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceConsul, Address: srv.Addr, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitValues(t, rec, map[string]string{"/a": "1", "/b": "2"})

	n := rec.problemCount()
	srv.Stop()
	waitProblem(t, rec, n, `consul: kv: backend unavailable: read keys "app"`)
	if got := rec.values(); got["/a"] != "1" || got["/b"] != "2" {
		t.Errorf("values during the outage: %v", got)
	}
	srv.Start()
	consulPut(t, srv, "app/a", "1b")
	consulPut(t, srv, "app/c", "3")
	waitValues(t, rec, map[string]string{"/a": "1b", "/c": "3"})
	// And the blocking queries follow again.
	consulPut(t, srv, "app/d", "4")
	waitValues(t, rec, map[string]string{"/a": "1b", "/c": "3", "/d": "4"})
	for _, err := range rec.problemErrors() {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("problem %v does not wrap ErrUnavailable", err)
		}
	}
}

// TestConsulDownAtStart starts the source before the agent.
func TestConsulDownAtStart(t *testing.T) {
	t.Parallel()
	srv := testkit.StartConsul(t)
	srv.Stop()
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceConsul, Address: "http://" + srv.Addr, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitProblem(t, rec, 0, "consul: kv: backend unavailable")
	if _, _, _, synced := rec.counts(); synced != 0 {
		t.Fatal("synced with the agent down")
	}
	srv.Start()
	consulPut(t, srv, "app/a", "1")
	waitValues(t, rec, map[string]string{"/a": "1"})
}

// TestConsulIndexBackwards restores a snapshot taken before later writes
// while the source's blocking query waits: the query answers with a lower
// index, and that answer is the new state (here, 20 keys fewer), not a
// stale one to skip. Writes after the restore get raft indexes above any
// earlier one, so they arrive however the index was kept; that the index
// starts over is TestConsulNextIndex's part.
func TestConsulIndexBackwards(t *testing.T) {
	t.Parallel()
	srv := testkit.StartConsul(t)
	consulPut(t, srv, "app/a", "1")
	snap := srv.MustDo(t, "GET", "/v1/snapshot", nil)
	for i := range 20 {
		consulPut(t, srv, fmt.Sprintf("app/later%02d", i), "x")
	}
	s := mustNew(t, config.Source{Type: config.SourceConsul, Address: srv.Addr, Prefix: "/app", Rescan: config.Duration(time.Hour)}, fast...).(*consulSource)
	waiting := make(chan uint64, 100)
	s.sent = func(_ consulWatch, index uint64) { waiting <- index }
	rec := newRecorder(t)
	start(t, s, rec)
	waitSynced(t, rec)
	if got := len(rec.values()); got != 21 {
		t.Fatalf("%d values before the restore, want 21", got)
	}
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("no blocking query within 30s")
	}
	// The query is on its way, but Consul may not hold it yet: a restore
	// wakes only the queries waiting when it happens. Restore again until
	// the source has the restored state (a restore of the same snapshot
	// changes nothing more).
	want := map[string]string{"/a": "1"}
	testkit.Eventually(t, time.Minute, func() error {
		srv.MustDo(t, "PUT", "/v1/snapshot", snap)
		for range 20 {
			if maps.Equal(rec.values(), want) {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("values after a restore: %s, want %s", describe(rec.values()), describe(want))
	})
	consulPut(t, srv, "app/b", "2")
	waitValues(t, rec, map[string]string{"/a": "1", "/b": "2"})
	if replaces, _, _, _ := rec.counts(); replaces != 1 {
		t.Errorf("%d full reads: the restore must be followed by the blocking query", replaces)
	}
}

func TestConsulNextIndex(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ prev, got, want uint64 }{
		{0, 0, 1},   // never wait from 0: it answers at once
		{0, 7, 7},   // first answer
		{7, 7, 7},   // the wait ended with no change
		{7, 9, 9},   // a change
		{9, 4, 0},   // backwards: start over
		{9, 0, 0},   // reset to 0: start over
		{1, 0, 0},   // reset to 0: start over
		{0, 12, 12}, // the answer after starting over
	} {
		if got := nextIndex(c.prev, c.got); got != c.want {
			t.Errorf("nextIndex(%d, %d) = %d, want %d", c.prev, c.got, got, c.want)
		}
	}
}

// TestConsulToken reads with an ACL token from a file, and reports a
// token Consul does not know without syncing and without showing it.
func TestConsulToken(t *testing.T) {
	t.Parallel()
	srv := testkit.StartConsul(t, testkit.WithConsulACLs("root-token"))
	consulPut(t, srv, "app/a", "1")
	consulPut(t, srv, "other/b", "2")
	srv.MustDo(t, "PUT", "/v1/acl/policy", []byte(`{"Name":"app-read","Rules":"key_prefix \"app\" { policy = \"read\" }"}`))
	var tok struct{ SecretID string }
	if err := json.Unmarshal(srv.MustDo(t, "PUT", "/v1/acl/token", []byte(`{"Policies":[{"Name":"app-read"}]}`)), &tok); err != nil || tok.SecretID == "" {
		t.Fatalf("token: %v %+v", err, tok)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := config.Source{Type: config.SourceConsul, Address: srv.Addr, TokenFile: file, Rescan: config.Duration(time.Hour)}
	good := newRecorder(t)
	start(t, mustNew(t, src, fast...), good)
	// The token reads app/ only; Consul leaves out what it may not read.
	waitValues(t, good, map[string]string{"/app/a": "1"})
	consulPut(t, srv, "app/c", "3")
	waitValues(t, good, map[string]string{"/app/a": "1", "/app/c": "3"})

	environ := WithEnviron(func() []string { return []string{"BAD=00000000-0000-0000-0000-00000000dead"} })
	src.TokenFile, src.TokenEnv = "", "BAD"
	bad := newRecorder(t)
	start(t, mustNew(t, src, opts(environ)...), bad)
	p := waitProblem(t, bad, 0, "consul: kv: backend unavailable: read keys")
	if !strings.Contains(p, "ACL not found") {
		t.Errorf("problem %q does not say the token was refused", p)
	}
	if strings.Contains(p, "dead") {
		t.Errorf("problem %q shows the token", p)
	}
	if _, _, _, synced := bad.counts(); synced != 0 {
		t.Error("synced with a token Consul does not know")
	}
}

// serviceValue returns the value of a service as JSON, or "" when there is
// none.
func serviceValue(t testing.TB, rec *recorder, service string) string {
	t.Helper()
	o, ok := rec.object(ConsulServiceName(service))
	if !ok {
		return ""
	}
	if o.Body["service"] != service || o.Body["key"] != service || o.Body["source"] != config.SourceConsul {
		t.Errorf("value of service %s: extra fields %v", service, o.Body)
	}
	data, err := json.Marshal(o.Body["value"])
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func waitService(t testing.TB, rec *recorder, service string, want []ConsulInstance) {
	t.Helper()
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		got := serviceValue(t, rec, service)
		var g, w any
		_ = json.Unmarshal([]byte(got), &g)
		_ = json.Unmarshal(data, &w)
		if got == "" || !reflect.DeepEqual(g, w) {
			return fmt.Errorf("service %s:\n got %s\nwant %s\nlast problems %q", service, got, data, rec.lastProblems())
		}
		return nil
	})
}

// TestConsulServices follows catalog services as lists of their healthy
// instances, beside KV values.
func TestConsulServices(t *testing.T) {
	t.Parallel()
	srv := testkit.StartConsul(t)
	consulPut(t, srv, "app/a", "1")
	srv.MustDo(t, "PUT", "/v1/agent/service/register", []byte(`{"ID":"web-1","Name":"web","Address":"10.0.0.1","Port":8080,"Tags":["blue"],"Meta":{"version":"1"}}`))
	srv.MustDo(t, "PUT", "/v1/agent/service/register", []byte(`{"ID":"web-2","Name":"web","Port":8081,"Check":{"CheckID":"web-2-ttl","TTL":"1h","Status":"critical"}}`))
	rec := newRecorder(t)
	start(t, mustNew(t, config.Source{Type: config.SourceConsul, Address: srv.Addr, Prefix: "/app", Services: []string{"web", "absent"}, Rescan: config.Duration(time.Hour)}, fast...), rec)
	waitSynced(t, rec)
	var node struct {
		Config struct{ NodeName, Datacenter string }
	}
	if err := json.Unmarshal(srv.MustDo(t, "GET", "/v1/agent/self", nil), &node); err != nil {
		t.Fatal(err)
	}
	web1 := ConsulInstance{ID: "web-1", Service: "web", Node: node.Config.NodeName, Datacenter: node.Config.Datacenter,
		Address: "10.0.0.1", Port: 8080, Tags: []string{"blue"}, Meta: map[string]string{"version": "1"}}
	// web-2 fails its check: it is left out.
	waitService(t, rec, "web", []ConsulInstance{web1})
	waitService(t, rec, "absent", []ConsulInstance{})
	if got := rec.values()["/a"]; got != "1" {
		t.Errorf("KV value /a = %q", got)
	}

	// web-2 passes: it joins, with its node's address.
	srv.MustDo(t, "PUT", "/v1/agent/check/pass/web-2-ttl", nil)
	web2 := ConsulInstance{ID: "web-2", Service: "web", Node: node.Config.NodeName, Datacenter: node.Config.Datacenter,
		Address: "127.0.0.1", Port: 8081, Tags: []string{}, Meta: map[string]string{}}
	waitService(t, rec, "web", []ConsulInstance{web1, web2})

	// A KV change does not touch the services, nor a service the KV values.
	consulPut(t, srv, "app/a", "2")
	srv.MustDo(t, "PUT", "/v1/agent/service/deregister/web-1", nil)
	waitService(t, rec, "web", []ConsulInstance{web2})
	testkit.Eventually(t, 30*time.Second, func() error {
		if got := rec.values()["/a"]; got != "2" {
			return fmt.Errorf("KV value /a = %q", got)
		}
		return nil
	})
	// A service that appears later.
	srv.MustDo(t, "PUT", "/v1/agent/service/register", []byte(`{"ID":"x","Name":"absent","Port":1}`))
	waitService(t, rec, "absent", []ConsulInstance{{ID: "x", Service: "absent", Node: node.Config.NodeName,
		Datacenter: node.Config.Datacenter, Address: "127.0.0.1", Port: 1, Tags: []string{}, Meta: map[string]string{}}})
	if replaces, _, _, _ := rec.counts(); replaces != 1 {
		t.Errorf("%d full reads: changes must come from blocking queries", replaces)
	}
}

// TestConsulConfig checks the options New refuses.
func TestConsulConfig(t *testing.T) {
	t.Parallel()
	environ := WithEnviron(func() []string { return []string{"TOKEN=x"} })
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		src  config.Source
		want string
	}{
		{"env and file", config.Source{TokenEnv: "TOKEN", TokenFile: "/t"}, "token_env and token_file exclude each other"},
		{"unset variable", config.Source{TokenEnv: "NOPE"}, "token_env: the variable NOPE is not set"},
		{"missing file", config.Source{TokenFile: "/nonexistent/t"}, "token_file: open /nonexistent/t"},
		{"empty file", config.Source{TokenFile: empty}, "is empty"},
		{"bad service", config.Source{Services: []string{"a/b"}}, `not a service name: "a/b"`},
		{"service twice", config.Source{Services: []string{"a", "a"}}, `"a" is named twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.src.Type = config.SourceConsul
			_, err := New(c.src, environ)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want ErrConfig saying %q", err, c.want)
			}
		})
	}
}
