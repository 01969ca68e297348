package kv

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v2"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
)

// fixture is one backend holding data, for the tests every backend passes.
type fixture interface {
	// source returns a source configuration for prefix and keys, and the
	// options New needs.
	source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option)
	// put sets the key (a path) to value; del removes it.
	put(t testing.TB, key, value string)
	del(t testing.TB, key string)
	// native is how the backend spells a path, as reported in "key".
	native(key string) string
	// watches reports whether changes reach the source without a rescan.
	watches() bool
}

// natsFixture is a bucket on an embedded NATS server.
type natsFixture struct {
	bus *testkit.Bus
	kv  jetstream.KeyValue
}

func newNATSFixture(t testing.TB) fixture {
	bus := testkit.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cfg"})
	if err != nil {
		t.Fatal(err)
	}
	return &natsFixture{bus: bus, kv: kv}
}

func (f *natsFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "kv", Type: config.SourceNATSKV, Bucket: "cfg", Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)},
		opts(WithNATSConn(f.bus.NC))
}

func (f *natsFixture) put(t testing.TB, key, value string) {
	t.Helper()
	if _, err := f.kv.PutString(context.Background(), kvKey(key), value); err != nil {
		t.Fatal(err)
	}
}

func (f *natsFixture) del(t testing.TB, key string) {
	t.Helper()
	if err := f.kv.Delete(context.Background(), kvKey(key)); err != nil {
		t.Fatal(err)
	}
}

func (f *natsFixture) native(key string) string { return kvKey(key) }
func (f *natsFixture) watches() bool            { return true }

// envFixture is an injected environment.
type envFixture struct {
	mu   sync.Mutex
	vars map[string]string
}

func newEnvFixture(testing.TB) fixture { return &envFixture{vars: map[string]string{}} }

func (f *envFixture) environ() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.vars))
	for k, v := range f.vars {
		out = append(out, k+"="+v)
	}
	return out
}

func (f *envFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "env", Type: config.SourceEnv, Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)},
		opts(WithEnviron(f.environ))
}

func (f *envFixture) put(_ testing.TB, key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vars[envName(key)] = value
}

func (f *envFixture) del(_ testing.TB, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.vars, envName(key))
}

func (f *envFixture) native(key string) string { return envName(key) }
func (f *envFixture) watches() bool            { return false }

// fileFixture is a YAML file rewritten whole, the way editors save: a new
// file renamed over the old one.
type fileFixture struct {
	path string
	mu   sync.Mutex
	vals map[string]string
}

func newFileFixture(t testing.TB) fixture {
	f := &fileFixture{path: filepath.Join(t.TempDir(), "values.yaml"), vals: map[string]string{}}
	f.write(t)
	return f
}

func (f *fileFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "file", Type: config.SourceFile, Path: f.path, Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)}, opts()
}

func (f *fileFixture) put(t testing.TB, key, value string) {
	f.mu.Lock()
	f.vals[key] = value
	f.mu.Unlock()
	f.write(t)
}

func (f *fileFixture) del(t testing.TB, key string) {
	f.mu.Lock()
	delete(f.vals, key)
	f.mu.Unlock()
	f.write(t)
}

// write writes the paths as nested mappings.
func (f *fileFixture) write(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	root := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(f.vals)) {
		segs := strings.Split(strings.TrimPrefix(k, "/"), "/")
		m := root
		for _, s := range segs[:len(segs)-1] {
			next, ok := m[s].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[s] = next
			}
			m = next
		}
		m[segs[len(segs)-1]] = f.vals[k]
	}
	f.mu.Unlock()
	data, err := yaml.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	writeRenamed(t, f.path, data)
}

// writeRenamed replaces path by writing a new file next to it and renaming
// it over path.
func writeRenamed(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (f *fileFixture) native(key string) string { return key }
func (f *fileFixture) watches() bool            { return true }

// etcdFixture is an etcd server.
type etcdFixture struct{ srv *etcdServer }

func newEtcdFixture(t testing.TB) fixture { return &etcdFixture{srv: startEtcd(t)} }

func (f *etcdFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "etcd", Type: config.SourceEtcd, Endpoints: []string{f.srv.url}, Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)}, opts()
}

func (f *etcdFixture) put(t testing.TB, key, value string) { f.srv.put(t, key, value) }
func (f *etcdFixture) del(t testing.TB, key string)        { f.srv.del(t, key) }
func (f *etcdFixture) native(key string) string            { return key }
func (f *etcdFixture) watches() bool                       { return true }

// redisFixture is a redis server.
type redisFixture struct{ srv *redisServer }

func newRedisFixture(t testing.TB) fixture { return &redisFixture{srv: startRedis(t)} }

func (f *redisFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "redis", Type: config.SourceRedis, Address: f.srv.addr, Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)}, opts()
}

func (f *redisFixture) put(t testing.TB, key, value string) { f.srv.do(t, "set", key, value) }
func (f *redisFixture) del(t testing.TB, key string)        { f.srv.do(t, "del", key) }
func (f *redisFixture) native(key string) string            { return key }
func (f *redisFixture) watches() bool                       { return true }

// consulFixture is a consul agent.
type consulFixture struct{ srv *testkit.Consul }

func newConsulFixture(t testing.TB) fixture { return &consulFixture{srv: testkit.StartConsul(t)} }

func (f *consulFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "consul", Type: config.SourceConsul, Address: f.srv.Addr, Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)}, opts()
}

func (f *consulFixture) put(t testing.TB, key, value string) {
	f.srv.MustDo(t, "PUT", "/v1/kv/"+f.native(key), []byte(value))
}

func (f *consulFixture) del(t testing.TB, key string) {
	f.srv.MustDo(t, "DELETE", "/v1/kv/"+f.native(key), nil)
}
func (f *consulFixture) native(key string) string { return strings.TrimPrefix(key, "/") }
func (f *consulFixture) watches() bool            { return true }

// zookeeperFixture is a ZooKeeper server.
type zookeeperFixture struct{ srv *zkServer }

func newZookeeperFixture(t testing.TB) fixture { return &zookeeperFixture{srv: startZooKeeper(t)} }

func (f *zookeeperFixture) source(prefix string, keys []string, rescan time.Duration) (config.Source, []Option) {
	return config.Source{Name: "zk", Type: config.SourceZookeeper, Endpoints: []string{f.srv.Addr}, Prefix: prefix, Keys: keys, Rescan: config.Duration(rescan)}, opts()
}

func (f *zookeeperFixture) put(t testing.TB, key, value string) { f.srv.put(t, key, value) }
func (f *zookeeperFixture) del(t testing.TB, key string)        { f.srv.del(t, key) }
func (f *zookeeperFixture) native(key string) string            { return key }
func (f *zookeeperFixture) watches() bool                       { return true }

var backends = []struct {
	typ string
	new func(testing.TB) fixture
}{
	{config.SourceNATSKV, newNATSFixture},
	{config.SourceEnv, newEnvFixture},
	{config.SourceFile, newFileFixture},
	{config.SourceEtcd, newEtcdFixture},
	{config.SourceRedis, newRedisFixture},
	{config.SourceConsul, newConsulFixture},
	{config.SourceZookeeper, newZookeeperFixture},
}

// sample is the data every backend holds for the selection tests.
var sample = map[string]string{
	"/myapp/database/url":  "postgres://db:5432/app",
	"/myapp/database/user": "app",
	"/myapp/upstream/a":    "10.0.0.1:80",
	"/myapp/upstream/b":    "10.0.0.2:80",
	"/myapp2/other":        "not under /myapp",
	"/other/key":           "y",
}

// TestSelection reads the same data through each backend with the prefix
// and keys of each case.
func TestSelection(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		prefix string
		keys   []string
		want   map[string]string
	}{
		{name: "everything", want: sample},
		{name: "prefix", prefix: "/myapp", want: map[string]string{
			"/database/url": "postgres://db:5432/app", "/database/user": "app",
			"/upstream/a": "10.0.0.1:80", "/upstream/b": "10.0.0.2:80",
		}},
		{name: "unclean prefix", prefix: "myapp//", want: map[string]string{
			"/database/url": "postgres://db:5432/app", "/database/user": "app",
			"/upstream/a": "10.0.0.1:80", "/upstream/b": "10.0.0.2:80",
		}},
		{name: "prefix and a key", prefix: "/myapp", keys: []string{"/database"}, want: map[string]string{
			"/database/url": "postgres://db:5432/app", "/database/user": "app",
		}},
		{name: "exact keys", prefix: "/myapp", keys: []string{"/upstream/a", "database/user"}, want: map[string]string{
			"/upstream/a": "10.0.0.1:80", "/database/user": "app",
		}},
		{name: "nested keys collapse", prefix: "/myapp", keys: []string{"/upstream", "/upstream/a"}, want: map[string]string{
			"/upstream/a": "10.0.0.1:80", "/upstream/b": "10.0.0.2:80",
		}},
		{name: "keys without prefix", keys: []string{"/myapp/upstream", "/other"}, want: map[string]string{
			"/myapp/upstream/a": "10.0.0.1:80", "/myapp/upstream/b": "10.0.0.2:80", "/other/key": "y",
		}},
		{name: "whole segments only", keys: []string{"/myapp/up", "/myapp"}, want: map[string]string{
			"/myapp/database/url": "postgres://db:5432/app", "/myapp/database/user": "app",
			"/myapp/upstream/a": "10.0.0.1:80", "/myapp/upstream/b": "10.0.0.2:80",
		}},
		{name: "keys sharing a string prefix", keys: []string{"/myapp", "/myapp2"}, want: map[string]string{
			"/myapp/database/url": "postgres://db:5432/app", "/myapp/database/user": "app",
			"/myapp/upstream/a": "10.0.0.1:80", "/myapp/upstream/b": "10.0.0.2:80", "/myapp2/other": "not under /myapp",
		}},
		{name: "prefix is a key", prefix: "/myapp/database/url", want: map[string]string{"/": "postgres://db:5432/app"}},
		{name: "nothing selected", prefix: "/absent", want: map[string]string{}},
	}
	for _, b := range backends {
		t.Run(b.typ, func(t *testing.T) {
			t.Parallel()
			f := b.new(t)
			for k, v := range sample {
				f.put(t, k, v)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					cfg, o := f.source(c.prefix, c.keys, time.Hour)
					rec := newRecorder(t)
					start(t, mustNew(t, cfg, o...), rec)
					waitValues(t, rec, c.want)
					if p := rec.syncedProblems(); len(p) != 0 {
						t.Errorf("synced with problems %q", p)
					}
				})
			}
		})
	}
}

// TestChanges follows an update, a delete, an addition and a change
// outside the prefix through each backend, and checks what each value
// carries.
func TestChanges(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.typ, func(t *testing.T) {
			t.Parallel()
			f := b.new(t)
			for k, v := range sample {
				f.put(t, k, v)
			}
			// A watching backend must see changes with no rescan at all.
			rescan := time.Hour
			if !f.watches() {
				rescan = 100 * time.Millisecond
			}
			cfg, o := f.source("/myapp", nil, rescan)
			rec := newRecorder(t)
			start(t, mustNew(t, cfg, o...), rec)
			want := map[string]string{
				"/database/url": "postgres://db:5432/app", "/database/user": "app",
				"/upstream/a": "10.0.0.1:80", "/upstream/b": "10.0.0.2:80",
			}
			waitValues(t, rec, want)

			o1, _ := rec.object("/database/url")
			if o1.Body["key"] != f.native("/myapp/database/url") || o1.Body["source"] != b.typ {
				t.Errorf("extra fields: got key %v source %v, want %q %q", o1.Body["key"], o1.Body["source"], f.native("/myapp/database/url"), b.typ)
			}

			f.put(t, "/myapp/database/url", "postgres://db2:5432/app")
			want["/database/url"] = "postgres://db2:5432/app"
			waitValues(t, rec, want)

			f.del(t, "/myapp/upstream/b")
			delete(want, "/upstream/b")
			waitValues(t, rec, want)

			f.put(t, "/myapp/new/key", "n")
			f.put(t, "/myapp2/ignored", "x")
			f.put(t, "/myapp/upstream/c", "10.0.0.3:80")
			want["/new/key"] = "n"
			want["/upstream/c"] = "10.0.0.3:80"
			waitValues(t, rec, want)

			replaces, upserts, deletes, synced := rec.counts()
			if synced != 1 {
				t.Errorf("synced %d times, want 1", synced)
			}
			if f.watches() && b.typ != config.SourceFile {
				// Watched changes come one by one, not as re-reads.
				if replaces != 1 || upserts < 3 || deletes != 1 {
					t.Errorf("replaces %d upserts %d deletes %d: want 1 replace, >= 3 upserts, 1 delete", replaces, upserts, deletes)
				}
			} else if replaces < 4 {
				t.Errorf("replaces %d: want one per re-read, >= 4", replaces)
			}
		})
	}
}

// TestPoll: a source that polls reads everything every rescan and follows
// nothing in between, through each backend: changes reach the sink only
// with the next full read, as a Replace (never an Upsert or Delete), and
// no read comes sooner than the rescan (a file source that watched its
// folder would read at once).
func TestPoll(t *testing.T) {
	t.Parallel()
	const rescan = 2 * time.Second
	for _, b := range backends {
		t.Run(b.typ, func(t *testing.T) {
			t.Parallel()
			f := b.new(t)
			f.put(t, "/myapp/port", "8080")
			f.put(t, "/myapp/gone", "x")
			cfg, o := f.source("/myapp", nil, rescan)
			cfg.Poll = true
			rec := newRecorder(t)
			start(t, mustNew(t, cfg, o...), rec)
			waitValues(t, rec, map[string]string{"/port": "8080", "/gone": "x"})
			f.put(t, "/myapp/port", "9090")
			f.del(t, "/myapp/gone")
			waitValues(t, rec, map[string]string{"/port": "9090"})
			if replaces, upserts, deletes, _ := rec.counts(); upserts != 0 || deletes != 0 || replaces < 2 {
				t.Errorf("replaces %d upserts %d deletes %d: want only full reads", replaces, upserts, deletes)
			}
			for _, gap := range rec.gaps() {
				if gap < rescan/2 {
					t.Errorf("full reads %s apart, want about %s: %s", gap, rescan, rec.gaps())
				}
			}
		})
	}
}
