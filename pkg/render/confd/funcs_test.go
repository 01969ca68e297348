package confd

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestSeq(t *testing.T) {
	tests := []struct {
		first, last int
		want        []int
	}{
		{1, 5, []int{1, 2, 3, 4, 5}},
		{5, 5, []int{5}},
		{0, 0, []int{0}},
		{-2, 1, []int{-2, -1, 0, 1}},
		{3, 1, []int{3, 2, 1}}, // counts down, like GNU seq with a negative step
		{1, -1, []int{1, 0, -1}},
	}
	for _, tc := range tests {
		if got := seq(tc.first, tc.last); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("seq(%d, %d) = %v, want %v", tc.first, tc.last, got, tc.want)
		}
	}
}

func TestArithmetic(t *testing.T) {
	if v, err := div(7, 2); v != 3 || err != nil {
		t.Errorf("div(7, 2) = %d, %v", v, err)
	}
	if v, err := div(-7, 2); v != -3 || err != nil {
		t.Errorf("div(-7, 2) = %d, %v (truncates toward zero)", v, err)
	}
	if _, err := div(1, 0); err == nil || err.Error() != "division by zero" {
		t.Errorf("div by zero: %v", err)
	}
	if v, err := mod(-7, 3); v != -1 || err != nil {
		t.Errorf("mod(-7, 3) = %d, %v (sign of the dividend)", v, err)
	}
	if _, err := mod(1, 0); err == nil || err.Error() != "modulo by zero" {
		t.Errorf("mod by zero: %v", err)
	}
}

func TestReverse(t *testing.T) {
	in := []string{"a", "b", "c"}
	if got := reverse(in); !reflect.DeepEqual(got, []string{"c", "b", "a"}) {
		t.Errorf("reverse strings = %v", got)
	}
	if !reflect.DeepEqual(in, []string{"a", "b", "c"}) {
		t.Errorf("reverse changed its argument: %v", in)
	}
	kv := []KVPair{{"/a", "1"}, {"/b", "2"}}
	if got := reverse(kv); !reflect.DeepEqual(got, []KVPair{{"/b", "2"}, {"/a", "1"}}) {
		t.Errorf("reverse []KVPair = %v", got)
	}
	// What gets returns is KVPairs, which confd's reverse passes through.
	pairs := KVPairs{{"/a", "1"}, {"/b", "2"}}
	if got := reverse(pairs); !reflect.DeepEqual(got, pairs) {
		t.Errorf("reverse KVPairs = %v, want it unchanged", got)
	}
	for _, v := range []any{"abc", []int{1, 2}, nil, []any{"x", "y"}} {
		if got := reverse(v); !reflect.DeepEqual(got, v) {
			t.Errorf("reverse(%#v) = %#v, want it unchanged", v, got)
		}
	}
	if got := reverse([]string{}); !reflect.DeepEqual(got, []string{}) {
		t.Errorf("reverse empty = %#v", got)
	}
}

func TestSortByLength(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"ccc", "a", "bb"}, []string{"a", "bb", "ccc"}},
		// Up to 12 items sort.Sort is an insertion sort: ties keep their order.
		{[]string{"ccc", "bb", "aa", "d", "ee"}, []string{"d", "bb", "aa", "ee", "ccc"}},
		{[]string{"é", "ab"}, []string{"é", "ab"}}, // bytes, not runes: both are 2
		{[]string{}, []string{}},
	}
	for _, tc := range tests {
		in := slices.Clone(tc.in)
		got := sortByLength(in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("sortByLength(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if len(in) > 0 && &got[0] != &in[0] {
			t.Errorf("sortByLength(%q) did not sort in place", tc.in)
		}
	}
	kvs := KVPairs{{"/ccc", "1"}, {"/a", "2"}, {"/bb", "3"}, {"/dd", "4"}}
	got := sortKVByLength(kvs)
	want := []KVPair{{"/a", "2"}, {"/bb", "3"}, {"/dd", "4"}, {"/ccc", "1"}}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual([]KVPair(kvs), want) {
		t.Errorf("sortKVByLength = %v (argument %v), want %v in place", got, kvs, want)
	}
}

func TestJSON(t *testing.T) {
	obj, err := unmarshalJSONObject(`{"a":1,"b":[true,null],"c":{"d":"e"}}`)
	if err != nil || !reflect.DeepEqual(obj, map[string]any{"a": 1.0, "b": []any{true, nil}, "c": map[string]any{"d": "e"}}) {
		t.Errorf("json = %#v, %v", obj, err)
	}
	if obj, err := unmarshalJSONObject("null"); obj != nil || err != nil {
		t.Errorf("json null = %#v, %v", obj, err)
	}
	for _, bad := range []string{`[1]`, `"s"`, `{`, ``} {
		if _, err := unmarshalJSONObject(bad); err == nil {
			t.Errorf("json(%q) gave no error", bad)
		}
	}
	tests := []struct {
		in   string
		want []any
	}{
		{`["b","a"]`, []any{"b", "a"}}, // document order, no sorting
		{`[1, 2.5, true, null, {"k":"v"}, [1]]`, []any{1.0, 2.5, true, nil, map[string]any{"k": "v"}, []any{1.0}}},
		{`[]`, []any{}},
		{`null`, nil},
	}
	for _, tc := range tests {
		got, err := unmarshalJSONArray(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("jsonArray(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"a":1}`, `"s"`, `[1,`} {
		if _, err := unmarshalJSONArray(bad); err == nil {
			t.Errorf("jsonArray(%q) gave no error", bad)
		}
	}
}

func TestCreateMap(t *testing.T) {
	m, err := createMap("a", 1, "b", "x")
	if err != nil || !reflect.DeepEqual(m, map[string]any{"a": 1, "b": "x"}) {
		t.Errorf("map = %v, %v", m, err)
	}
	if m, err := createMap(); err != nil || len(m) != 0 {
		t.Errorf("map() = %v, %v", m, err)
	}
	if _, err := createMap("a"); err == nil || err.Error() != "invalid map call" {
		t.Errorf("odd arguments: %v", err)
	}
	if _, err := createMap(1, "a"); err == nil || err.Error() != "map keys must be strings" {
		t.Errorf("non-string key: %v", err)
	}
}

func TestBase64(t *testing.T) {
	if got := base64Encode("hello, world"); got != "aGVsbG8sIHdvcmxk" {
		t.Errorf("encode = %q", got)
	}
	if got, err := base64Decode("aGk="); got != "hi" || err != nil {
		t.Errorf("decode = %q, %v", got, err)
	}
	// Newlines are skipped by Go's decoder (so by confd's too).
	if got, err := base64Decode("aG\nk=\n"); got != "hi" || err != nil {
		t.Errorf("decode with newlines = %q, %v", got, err)
	}
	for _, bad := range []string{"aGk", "a$==", "aGk= "} {
		if _, err := base64Decode(bad); err == nil {
			t.Errorf("decode(%q) gave no error (standard, padded base64 only)", bad)
		}
	}
}

func TestGetenv(t *testing.T) {
	s := &settings{getenv: func(k string) string { return map[string]string{"SET": "v", "EMPTY": ""}[k] }}
	getenv := s.getenvFunc()
	tests := []struct {
		key  string
		def  []string
		want string
	}{
		{"SET", nil, "v"},
		{"SET", []string{"d"}, "v"},
		{"UNSET", nil, ""},
		{"UNSET", []string{"d", "ignored"}, "d"},
		{"EMPTY", []string{"d"}, "d"}, // empty counts as unset
	}
	for _, tc := range tests {
		if got := getenv(tc.key, tc.def...); got != tc.want {
			t.Errorf("getenv(%q, %q) = %q, want %q", tc.key, tc.def, got, tc.want)
		}
	}
}

func TestLookups(t *testing.T) {
	ctx := context.Background()
	if got := lookupIP(ctx, testResolver, "db.internal"); !reflect.DeepEqual(got, []string{"10.0.0.10", "10.0.0.9", "2001:db8::1", "::1"}) {
		t.Errorf("lookupIP = %q (sorted as text)", got)
	}
	if got := lookupIP(ctx, testResolver, "missing"); got != nil {
		t.Errorf("lookupIP of a missing name = %#v, want nil", got)
	}
	if got := lookupIPFamily(ctx, testResolver, "v4only.internal", ":"); got != nil {
		t.Errorf("lookupIPV6 with no IPv6 = %#v, want nil", got)
	}
	res := fakeResolver{srvs: map[string][]*net.SRV{"_x._tcp.n": {
		{Target: "b.", Port: 1, Priority: 1, Weight: 1},
		{Target: "a.", Port: 8080, Priority: 1, Weight: 1},
		{Target: "a.", Port: 80, Priority: 2, Weight: 1},
		{Target: "a.", Port: 9, Priority: 1, Weight: 1},
	}}}
	var got []string
	for _, s := range lookupSRV(ctx, res, "x", "tcp", "n") {
		got = append(got, srvSortKey(s))
	}
	// Compared as concatenated text, so port 80 comes before 8080 but
	// port 9 after it: "a.8021" < "a.808011" < "a.911" < "b.111".
	want := []string{"a.8021", "a.808011", "a.911", "b.111"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lookupSRV order %q, want %q", got, want)
	}
	if got := lookupSRV(ctx, res, "y", "tcp", "n"); got == nil || len(got) != 0 {
		t.Errorf("lookupSRV of a missing name = %#v, want an empty list", got)
	}
}

func TestLookupIface(t *testing.T) {
	if got := lookupIfaceIPV4("no-such-interface0"); got != "" {
		t.Errorf("lookupIfaceIPV4 of a missing interface = %q", got)
	}
	if got := lookupIfaceIPV6("no-such-interface0"); got != "" {
		t.Errorf("lookupIfaceIPV6 of a missing interface = %q", got)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no loopback interface named lo")
	}
	addrs, _ := lo.Addrs()
	var has4 bool
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			has4 = true
		}
	}
	if has4 {
		if got := lookupIfaceIPV4("lo"); !strings.HasPrefix(got, "127.") {
			t.Errorf("lookupIfaceIPV4(lo) = %q", got)
		}
	}
}

func TestFileExists(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !fileExists(f) || !fileExists(dir) || fileExists(filepath.Join(dir, "nope")) {
		t.Error("fileExists")
	}
	// A path below a regular file cannot exist, but the error is ENOTDIR,
	// not "not exist": confd only says false for "not exist".
	if !fileExists(filepath.Join(f, "below")) {
		t.Error("fileExists of a path below a file should be true, as in confd")
	}
}

func TestUtilityFuncs(t *testing.T) {
	words := []struct{ in, snake, camel, kebab string }{
		{"HTTPServerName", "http_server_name", "httpServerName", "http-server-name"},
		{"fooBar baz", "foo_bar_baz", "fooBarBaz", "foo-bar-baz"},
		{"already_snake-case", "already_snake_case", "alreadySnakeCase", "already-snake-case"},
		{"abc1Def", "abc1_def", "abc1Def", "abc1-def"},
		{"ID", "id", "id", "id"},
		{"", "", "", ""},
		{"__", "", "", ""},
	}
	for _, w := range words {
		if got := snakecase(w.in); got != w.snake {
			t.Errorf("snakecase(%q) = %q, want %q", w.in, got, w.snake)
		}
		if got := camelcase(w.in); got != w.camel {
			t.Errorf("camelcase(%q) = %q, want %q", w.in, got, w.camel)
		}
		if got := kebabcase(w.in); got != w.kebab {
			t.Errorf("kebabcase(%q) = %q, want %q", w.in, got, w.kebab)
		}
	}
	empties := []struct {
		v    any
		want bool
	}{
		{nil, true}, {"", true}, {"x", false}, {0, true}, {1, false}, {0.0, true}, {uint8(0), true},
		{false, true}, {true, false}, {[]string{}, true}, {map[string]any{}, true},
		{(*int)(nil), true}, {KVPair{}, true}, {KVPair{Key: "/a"}, false},
	}
	for _, e := range empties {
		if got := isEmpty(e.v); got != e.want {
			t.Errorf("empty(%#v) = %v", e.v, got)
		}
	}
	if got := indent(-3, "a"); got != "a" {
		t.Errorf("indent negative = %q", got)
	}
	if got := nindent(2, ""); got != "\n" {
		t.Errorf("nindent empty = %q", got)
	}
	if got := coalesce("", 0, nil); got != nil {
		t.Errorf("coalesce of empties = %v", got)
	}
	if _, err := regexFind("(", "x"); err == nil {
		t.Error("regexFind with a bad pattern gave no error")
	}
	if _, err := regexReplaceAll("(", "x", "y"); err == nil {
		t.Error("regexReplaceAll with a bad pattern gave no error")
	}
	if _, err := toJSON(func() {}); err == nil {
		t.Error("toJson of a func gave no error")
	}
	if got := repeat(-1, "x"); got != "" {
		t.Errorf("repeat -1 = %q", got)
	}
	if got := pluck("k"); got != nil {
		t.Errorf("pluck of nothing = %v", got)
	}
}

func TestInclude(t *testing.T) {
	files := map[string]string{
		"conf.d/app.toml":      goodTOML,
		"templates/self.tmpl":  `{{include "self.tmpl"}}`,
		"templates/a.tmpl":     `a>{{include "b.tmpl"}}`,
		"templates/b.tmpl":     `b>{{include "a.tmpl"}}`,
		"templates/bad.tmpl":   `{{nope}}`,
		"templates/fail.tmpl":  `{{getv "/missing"}}`,
		"templates/dot.tmpl":   `[{{.}}]`,
		"templates/sub/x.tmpl": `x={{getv "/db"}}`,
	}
	tests := []struct {
		tmpl string
		want string // output, or a substring of the error
		err  bool
	}{
		{`{{include "sub/x.tmpl"}}`, "x=1", false},
		{`{{include "./sub/../sub/x.tmpl"}}`, "x=1", false},
		{`{{include "dot.tmpl"}}{{include "dot.tmpl" "v"}}`, "[<no value>][v]", false},
		{`{{include "a.tmpl"}}`, "include cycle detected: " + "%DIR%/templates/a.tmpl is already being processed", true},
		{`{{include "self.tmpl"}}`, "include cycle detected", true},
		{`{{include "../conf.d/app.toml"}}`, `include path "../conf.d/app.toml" is outside template directory`, true},
		{`{{include "/etc/passwd"}}`, "include /etc/passwd: open %DIR%/templates/etc/passwd", true},
		{`{{include "."}}`, `include path "." is outside template directory`, true},
		{`{{include "nope.tmpl"}}`, "include nope.tmpl: open", true},
		{`{{include "bad.tmpl"}}`, `parse include bad.tmpl: template: bad.tmpl:1: function "nope" not defined`, true},
		{`{{include "fail.tmpl"}}`, "execute include fail.tmpl: template: fail.tmpl:1:2: executing \"fail.tmpl\" at <getv \"/missing\">: error calling getv: key does not exist: /missing", true},
		{`{{include "d0.tmpl"}}`, "maximum include depth (10) exceeded", true},
		{`{{include "d2.tmpl"}}`, "d11", false}, // ten levels deep is allowed
	}
	for i := range 11 {
		files["templates/d"+strconv.Itoa(i)+".tmpl"] = `{{include "d` + strconv.Itoa(i+1) + `.tmpl"}}`
	}
	files["templates/d11.tmpl"] = "d11"
	for _, tc := range tests {
		files["templates/app.tmpl"] = tc.tmpl
		dir := writeConfdir(t, files)
		rs, err := LoadConfdir(dir)
		if err != nil {
			t.Fatal(err)
		}
		out, err := rs[0].Render(map[string]string{"/app/db": "1"})
		want := strings.ReplaceAll(tc.want, "%DIR%", dir)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want it to contain %q", tc.tmpl, err, want)
			}
			continue
		}
		if err != nil || string(out) != want {
			t.Errorf("%s = %q, %v; want %q", tc.tmpl, out, err, want)
		}
	}
}

func TestIsPathWithin(t *testing.T) {
	tests := []struct {
		p, dir string
		want   bool
	}{
		{"/t/a.tmpl", "/t", true},
		{"/t/sub/a.tmpl", "/t/", true},
		{"/t", "/t", false},
		{"/t/../x", "/t", false},
		{"/tx/a", "/t", false},
		{"/t/..a", "/t", true},
	}
	for _, tc := range tests {
		if got := isPathWithin(tc.p, tc.dir); got != tc.want {
			t.Errorf("isPathWithin(%q, %q) = %v", tc.p, tc.dir, got)
		}
	}
}
