package confd

import (
	"errors"
	"path"
	"reflect"
	"testing"
)

func newTestStore(kv map[string]string) *Store {
	s := NewStore()
	for k, v := range kv {
		s.Set(k, v)
	}
	return s
}

var storeData = map[string]string{
	"/app":                 "app itself",
	"/app/port":            "8080",
	"/app/db/host":         "db1",
	"/app/db/user":         "rob",
	"/app/db/replica/host": "db2",
	"/app/up/a":            "10.0.0.9",
	"/app/up/b":            "10.0.0.10",
	"/app/up/c":            "10.0.0.9",
	"/apple/x":             "fruit",
	"/top":                 "top level",
	"/deep/a/b/c":          "deep",
}

func TestStoreGetValue(t *testing.T) {
	s := newTestStore(map[string]string{"/a": "1", "/empty": ""})
	tests := []struct {
		key     string
		def     []string
		want    string
		missing bool
	}{
		{key: "/a", want: "1"},
		{key: "/a", def: []string{"d"}, want: "1"},
		{key: "/empty", def: []string{"d"}, want: ""}, // exists: the default is not used
		{key: "/b", def: []string{"d", "ignored"}, want: "d"},
		{key: "/b", def: []string{""}, want: ""},
		{key: "/b", missing: true},
		{key: "a", missing: true}, // keys are exact: no leading-slash fix-up
	}
	for _, tc := range tests {
		got, err := s.GetValue(tc.key, tc.def...)
		if tc.missing {
			var ke *KeyError
			if !errors.Is(err, ErrNotExist) || !errors.As(err, &ke) || ke.Key != tc.key || err.Error() != "key does not exist: "+tc.key {
				t.Errorf("GetValue(%q): %v", tc.key, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("GetValue(%q, %q) = %q, %v; want %q", tc.key, tc.def, got, err, tc.want)
		}
	}
	if kv, err := s.Get("/a"); err != nil || kv != (KVPair{Key: "/a", Value: "1"}) {
		t.Errorf("Get = %v, %v", kv, err)
	}
	if _, err := s.Get("/b"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Get missing: %v", err)
	}
	if !s.Exists("/empty") || s.Exists("/b") {
		t.Error("Exists")
	}
	s.Del("/a")
	if s.Exists("/a") || s.Len() != 1 {
		t.Error("Del")
	}
	s.Purge()
	if s.Len() != 0 {
		t.Error("Purge")
	}
}

func TestStoreGetAll(t *testing.T) {
	s := newTestStore(storeData)
	tests := []struct {
		pattern string
		keys    []string
		values  []string // getvs: sorted by value, duplicates kept
	}{
		{"/app/up/*", []string{"/app/up/a", "/app/up/b", "/app/up/c"}, []string{"10.0.0.10", "10.0.0.9", "10.0.0.9"}},
		{"/app/*", []string{"/app/port"}, []string{"8080"}}, // '*' does not cross '/'
		{"/app/*/host", []string{"/app/db/host"}, []string{"db1"}},
		{"/app/db/*/host", []string{"/app/db/replica/host"}, []string{"db2"}},
		{"/app", []string{"/app"}, []string{"app itself"}},
		{"/app*", []string{"/app"}, []string{"app itself"}},
		{"/app?e/*", []string{"/apple/x"}, []string{"fruit"}},
		{"/app/up/[ab]", []string{"/app/up/a", "/app/up/b"}, []string{"10.0.0.10", "10.0.0.9"}},
		{"/app/up/[^a]", []string{"/app/up/b", "/app/up/c"}, []string{"10.0.0.10", "10.0.0.9"}},
		{"/*", []string{"/app", "/top"}, []string{"app itself", "top level"}},
		{"/nothing/*", []string{}, []string{}},
		{"", []string{}, []string{}},
	}
	for _, tc := range tests {
		kvs, err := s.GetAll(tc.pattern)
		if err != nil {
			t.Fatalf("GetAll(%q): %v", tc.pattern, err)
		}
		keys := []string{}
		for _, kv := range kvs {
			keys = append(keys, kv.Key)
			if kv.Value != storeData[kv.Key] {
				t.Errorf("GetAll(%q): %v has the wrong value", tc.pattern, kv)
			}
		}
		if !reflect.DeepEqual(keys, tc.keys) {
			t.Errorf("GetAll(%q) keys %q, want %q", tc.pattern, keys, tc.keys)
		}
		values, err := s.GetAllValues(tc.pattern)
		if err != nil || !reflect.DeepEqual(values, tc.values) {
			t.Errorf("GetAllValues(%q) = %q, %v; want %q", tc.pattern, values, err, tc.values)
		}
	}

	if _, err := s.GetAll("/app/["); !errors.Is(err, path.ErrBadPattern) || err.Error() != `invalid pattern "/app/[": syntax error in pattern` {
		t.Errorf("bad pattern: %v", err)
	}
	if _, err := s.GetAllValues("/app/["); !errors.Is(err, path.ErrBadPattern) {
		t.Errorf("bad pattern (getvs): %v", err)
	}
	// As in confd the pattern is only checked against keys: an empty store
	// has nothing to check it against.
	if kvs, err := NewStore().GetAll("/app/["); err != nil || len(kvs) != 0 {
		t.Errorf("bad pattern on an empty store: %v, %v", kvs, err)
	}
}

func TestStoreList(t *testing.T) {
	s := newTestStore(storeData)
	tests := []struct {
		dir   string
		ls    []string
		lsdir []string
	}{
		// A key equal to dir adds its own base name next to its children.
		{"/app", []string{"app", "db", "port", "up"}, []string{"db", "up"}},
		{"/app/", []string{"db", "port", "up"}, []string{"db", "up"}},
		{"/app/db", []string{"host", "replica", "user"}, []string{"replica"}},
		{"/app/up", []string{"a", "b", "c"}, []string{}},
		{"/app/port", []string{"port"}, []string{}},
		// Whole segments: /apple is not under /app, and /ap lists nothing.
		{"/ap", []string{}, []string{}},
		{"/apple", []string{"x"}, []string{}},
		// "/" only reaches keys directly under the root, and lsdir "/"
		// is always empty.
		{"/", []string{"app", "top"}, []string{}},
		{"/deep", []string{"a"}, []string{"a"}},
		{"/deep/a", []string{"b"}, []string{"b"}},
		{"/nothing", []string{}, []string{}},
		{"", []string{}, []string{}},
	}
	for _, tc := range tests {
		if got := s.List(tc.dir); !reflect.DeepEqual(got, tc.ls) {
			t.Errorf("List(%q) = %q, want %q", tc.dir, got, tc.ls)
		}
		if got := s.ListDir(tc.dir); !reflect.DeepEqual(got, tc.lsdir) {
			t.Errorf("ListDir(%q) = %q, want %q", tc.dir, got, tc.lsdir)
		}
	}
}
