package kv

import (
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
)

func TestScope(t *testing.T) {
	t.Parallel()
	type named struct {
		key  string
		name string // "" when not selected
	}
	cases := []struct {
		name      string
		prefix    string
		keys      []string
		selectors []string
		names     []named
	}{
		{
			name: "no prefix, no keys", selectors: []string{"/"},
			names: []named{{"/a/b", "/a/b"}, {"/", "/"}, {"/a//b/", "/a/b"}, {"a/b", ""}},
		},
		{
			name: "prefix", prefix: "/app", selectors: []string{"/app"},
			names: []named{
				{"/app/db/url", "/db/url"}, {"/app", "/"}, {"/apple/x", ""}, {"/ap", ""},
				{"/app/../x", ""}, {"/app/./db", "/db"},
			},
		},
		{
			name: "prefix cleaned", prefix: "app//", selectors: []string{"/app"},
			names: []named{{"/app/x", "/x"}},
		},
		{
			name: "keys joined to the prefix", prefix: "/app", keys: []string{"db", "/cache/", "/db/url"},
			selectors: []string{"/app/cache", "/app/db"},
			names:     []named{{"/app/db/url", "/db/url"}, {"/app/cache", "/cache"}, {"/app/web", ""}, {"/app/dbx", ""}},
		},
		{
			name: "sorted selectors keep their nesting apart", keys: []string{"/a-b", "/a/b", "/a"},
			selectors: []string{"/a", "/a-b"},
			names:     []named{{"/a/b/c", "/a/b/c"}, {"/a-b", "/a-b"}, {"/a-c", ""}},
		},
		{
			name: "root key", prefix: "/app", keys: []string{"/", "/db"}, selectors: []string{"/app"},
		},
		{
			name: "dot keys stay inside", prefix: "/app", keys: []string{"x/.."}, selectors: []string{"/app"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, err := newScope(c.prefix, c.keys)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(sc.selectors, c.selectors) {
				t.Errorf("selectors %q, want %q", sc.selectors, c.selectors)
			}
			for _, n := range c.names {
				got, ok := sc.name(n.key)
				if ok != (n.name != "") || got != n.name {
					t.Errorf("name(%q) = %q, %v; want %q", n.key, got, ok, n.name)
				}
			}
		})
	}
	for _, keys := range [][]string{{"../x"}, {"/db", "/../../etc"}} {
		if _, err := newScope("/app", keys); !errors.Is(err, ErrConfig) {
			t.Errorf("keys %q: err %v, want ErrConfig", keys, err)
		}
	}
}

func TestKVKey(t *testing.T) {
	t.Parallel()
	cases := []struct{ path, key string }{
		{"/a/b/c", "a.b.c"},
		{"/myapp/database/url", "myapp.database.url"},
		{"/Web-1/host_name", "Web-1.host_name"},
		{"/web/host name/a.b", "web.host=20name.a=2Eb"},
		{"/x=y", "x=3Dy"},
		{"/sl*sh/>/é", "sl=2Ash.=3E.=C3=A9"},
		{"/a/...", "a.=2E=2E=2E"},
		{"/", ""},
	}
	for _, c := range cases {
		if got := kvKey(c.path); got != c.key {
			t.Errorf("kvKey(%q) = %q, want %q", c.path, got, c.key)
		}
		if c.key == "" {
			continue
		}
		got, err := kvPath(c.key)
		if err != nil || got != c.path {
			t.Errorf("kvPath(%q) = %q, %v; want %q", c.key, got, err, c.path)
		}
	}
	bad := []string{
		"a/b",     // a slash is a separator only in paths
		"a=2eb",   // lower-case hex
		"a=41",    // "A" needs no escape
		"a=2F",    // an escaped slash would be a separator
		"a=2",     // short escape
		"a=",      // short escape
		"a.=2E",   // the segment "."
		"=2E=2E",  // the segment ".."
		"a..b",    // empty segment
		"",        // nothing
		"a.b c",   // not a valid KV key at all
		"a.*.>",   // wildcards
		"a=ZZ.b",  // not hex
		"a.b.=3d", // lower-case hex
	}
	for _, k := range bad {
		if p, err := kvPath(k); err == nil {
			t.Errorf("kvPath(%q) = %q, want an error", k, p)
		}
	}
}

// FuzzKVKey checks that every clean path survives the trip to a KV key and
// back, and that every key kvPath accepts is the encoding of its path.
func FuzzKVKey(f *testing.F) {
	for _, s := range []string{"/a/b", "/web/host name/a.b", "/x=y", "/é/..x", "a.b", "a=2E"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := path.Clean("/" + s)
		if p != "/" {
			k := kvKey(p)
			if !keyValidForTest(k) {
				t.Fatalf("kvKey(%q) = %q, not a valid KV key", p, k)
			}
			back, err := kvPath(k)
			if err != nil || back != p {
				t.Fatalf("kvPath(kvKey(%q)) = %q, %v", p, back, err)
			}
		}
		if q, err := kvPath(s); err == nil {
			if q != path.Clean(q) || kvKey(q) != s {
				t.Fatalf("kvPath(%q) = %q, which is not clean or does not encode back", s, q)
			}
		}
	})
}

// keyValidForTest is the KV key rule of the NATS client.
func keyValidForTest(k string) bool {
	if k == "" || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !plainKeyByte(c) && c != '.' && c != '=' && c != '/' {
			return false
		}
	}
	return true
}

func TestKVFilters(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix string
		keys   []string
		want   []string
	}{
		{"", nil, []string{">"}},
		{"/app", nil, []string{"app", "app.>"}},
		{"/app", []string{"/db", "/web cache"}, []string{"app.db", "app.db.>", "app.web=20cache", "app.web=20cache.>"}},
	}
	for _, c := range cases {
		sc, err := newScope(c.prefix, c.keys)
		if err != nil {
			t.Fatal(err)
		}
		if got := sc.kvFilters(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("prefix %q keys %q: filters %q, want %q", c.prefix, c.keys, got, c.want)
		}
	}
}

func TestEnvNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix string
		keys   []string
		vars   map[string]string // variable -> name ("" when not selected)
	}{
		{"", nil, map[string]string{
			"MYAPP_DATABASE_URL": "/myapp/database/url", "PATH": "/path", "http_proxy": "/http/proxy",
			"A__B": "/a/b", "_X": "/x",
		}},
		{"/myapp", nil, map[string]string{
			"MYAPP_DATABASE_URL": "/database/url", "MYAPP": "/", "MYAPP2_X": "", "myapp_x": "", "OTHER": "",
		}},
		{"/my_app", nil, map[string]string{"MY_APP_PORT": "/port", "MY_APPX": ""}},
		{"/myapp", []string{"/database", "/cache/host"}, map[string]string{
			"MYAPP_DATABASE_URL": "/database/url", "MYAPP_DATABASE": "/database", "MYAPP_DATABASEX": "",
			"MYAPP_CACHE_HOST": "/cache/host", "MYAPP_CACHE_PORT": "",
		}},
		{"/MyApp", nil, map[string]string{"MYAPP_URL": "/url"}},
	}
	for _, c := range cases {
		sc, err := newScope(c.prefix, c.keys)
		if err != nil {
			t.Fatal(err)
		}
		es := sc.env()
		for v, want := range c.vars {
			got, ok := es.name(v)
			if ok != (want != "") || got != want {
				t.Errorf("prefix %q keys %q: name(%s) = %q, %v; want %q", c.prefix, c.keys, v, got, ok, want)
			}
		}
	}
	if got := envName("/myapp/database/url"); got != "MYAPP_DATABASE_URL" {
		t.Errorf("envName = %q", got)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	environ := WithEnviron(func() []string { return []string{"PW=secret", "EMPTY="} })
	cases := []struct {
		name string
		src  config.Source
		opts []Option
		err  string // "" when New must succeed
	}{
		{name: "unknown type", src: config.Source{Type: "vault"}, err: `type "vault" is not a key-value source`},
		{name: "manifests is not a kv source", src: config.Source{Type: config.SourceManifests, Path: "/x"}, err: "not a key-value source"},
		{name: "negative rescan", src: config.Source{Type: config.SourceEnv, Rescan: config.Duration(-time.Second)}, err: "rescan"},
		{name: "key leaves prefix", src: config.Source{Type: config.SourceEnv, Prefix: "/a", Keys: []string{"../b"}}, err: "leaves the prefix"},
		{name: "env", src: config.Source{Type: config.SourceEnv}},
		{name: "file needs a path", src: config.Source{Type: config.SourceFile}, err: "path is required"},
		{name: "file", src: config.Source{Type: config.SourceFile, Path: "values.yaml"}},
		{name: "natskv needs a bucket", src: config.Source{Type: config.SourceNATSKV}, err: "bucket is required"},
		{name: "natskv bucket name", src: config.Source{Type: config.SourceNATSKV, Bucket: "a.b"}, err: `bucket "a.b"`},
		{name: "natskv", src: config.Source{Type: config.SourceNATSKV, Bucket: "cfg"}},
		{name: "natskv addresses", src: config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Address: "nats://a:4222, b:4223"}},
		{name: "natskv bad address", src: config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Address: "nats://%zz"}, err: "address"},
		{name: "natskv password without user", src: config.Source{Type: config.SourceNATSKV, Bucket: "cfg", PasswordEnv: "PW"}, opts: []Option{environ}, err: "username is not"},
		{name: "natskv with user", src: config.Source{Type: config.SourceNATSKV, Bucket: "cfg", Username: "u", PasswordEnv: "PW"}, opts: []Option{environ}},
		{name: "etcd needs endpoints", src: config.Source{Type: config.SourceEtcd}, err: "endpoints are required"},
		{name: "etcd empty endpoint", src: config.Source{Type: config.SourceEtcd, Endpoints: []string{" "}}, err: "empty"},
		{name: "etcd unset password", src: config.Source{Type: config.SourceEtcd, Endpoints: []string{"x:1"}, Username: "u", PasswordEnv: "NOPE"}, opts: []Option{environ}, err: "NOPE is not set"},
		{name: "etcd empty password", src: config.Source{Type: config.SourceEtcd, Endpoints: []string{"x:1"}, Username: "u", PasswordEnv: "EMPTY"}, opts: []Option{environ}, err: "EMPTY is not set"},
		{name: "etcd user without password", src: config.Source{Type: config.SourceEtcd, Endpoints: []string{"x:1"}, Username: "u"}, err: "go together"},
		{name: "etcd", src: config.Source{Type: config.SourceEtcd, Endpoints: []string{"x:1"}, Username: "u", PasswordEnv: "PW"}, opts: []Option{environ}},
		{name: "etcd password file", src: config.Source{Type: config.SourceEtcd, Endpoints: []string{"x:1"}, Username: "u", PasswordFile: "/nonexistent/pw"}, err: "password_file: open /nonexistent/pw"},
		{name: "consul", src: config.Source{Type: config.SourceConsul}},
		{name: "consul with token and services", src: config.Source{Type: config.SourceConsul, Address: "https://consul:8501", TokenEnv: "PW", Services: []string{"web"}}, opts: []Option{environ}},
		{name: "zookeeper needs endpoints", src: config.Source{Type: config.SourceZookeeper}, err: "endpoints are required"},
		{name: "zookeeper", src: config.Source{Type: config.SourceZookeeper, Endpoints: []string{"x:2181"}, Username: "u", PasswordEnv: "PW"}, opts: []Option{environ}},
		{name: "redis needs an address", src: config.Source{Type: config.SourceRedis}, err: "address is required"},
		{name: "redis bad address", src: config.Source{Type: config.SourceRedis, Address: "localhost"}, err: "host:port"},
		{name: "redis bad url", src: config.Source{Type: config.SourceRedis, Address: "redis://x:1/notanumber"}, err: "address"},
		{name: "redis negative database", src: config.Source{Type: config.SourceRedis, Address: "x:1", Database: -1}, err: "negative"},
		{name: "redis", src: config.Source{Type: config.SourceRedis, Address: "x:1", Database: 3, PasswordEnv: "PW"}, opts: []Option{environ}},
		{name: "redis url", src: config.Source{Type: config.SourceRedis, Address: "redis://x:1/2"}},
		{name: "nil conn", src: config.Source{Type: config.SourceNATSKV, Bucket: "cfg"}, opts: []Option{WithNATSConn(nil)}, err: "nil connection"},
		{name: "nil environ", src: config.Source{Type: config.SourceEnv}, opts: []Option{WithEnviron(nil)}, err: "nil function"},
		{name: "bad backoff", src: config.Source{Type: config.SourceEnv}, opts: []Option{WithBackoff(time.Second, time.Millisecond)}, err: "backoff"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.src, c.opts...)
			if c.err == "" {
				if err != nil || s == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("New: %v; want ErrConfig containing %q", err, c.err)
			}
		})
	}
}

func TestRedisSettings(t *testing.T) {
	t.Parallel()
	s, err := New(config.Source{Type: config.SourceRedis, Address: "x:1", Database: 3, Prefix: "/my*app", Keys: []string{"/a?", "/b"}})
	if err != nil {
		t.Fatal(err)
	}
	r := s.(*redisSource)
	want := []string{
		`__keyspace@3__:/my\*app/a\?`, `__keyspace@3__:/my\*app/a\?/*`,
		`__keyspace@3__:/my\*app/b`, `__keyspace@3__:/my\*app/b/*`,
	}
	if !reflect.DeepEqual(r.patterns, want) {
		t.Errorf("patterns %q, want %q", r.patterns, want)
	}
	u, err := New(config.Source{Type: config.SourceRedis, Address: "redis://x:1/2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.(*redisSource).patterns; !reflect.DeepEqual(got, []string{"__keyspace@2__:/*"}) {
		t.Errorf("url database: patterns %q", got)
	}
}
