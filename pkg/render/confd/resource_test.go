package confd

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeConfdir makes a confdir from path -> content (paths relative to
// the confdir, such as "conf.d/app.toml" and "templates/app.tmpl").
func writeConfdir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// loadOne loads a confdir expected to hold exactly one good resource.
func loadOne(t *testing.T, files map[string]string, opts ...Option) Resource {
	t.Helper()
	rs, err := LoadConfdir(writeConfdir(t, files), opts...)
	if err != nil {
		t.Fatalf("LoadConfdir: %v", err)
	}
	if len(rs) != 1 {
		t.Fatalf("got %d resources, want 1", len(rs))
	}
	return rs[0]
}

const goodTOML = `[template]
src = "app.tmpl"
dest = "/etc/app.conf"
prefix = "/app"
keys = ["/db"]
`

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		toml  string
		tmpl  string // templates/app.tmpl; "-" for none
		field string
		line  int
		is    []error
		text  []string // substrings of the message
	}{
		{
			name: "toml syntax",
			toml: "[template\nsrc = \"app.tmpl\"\n",
			line: 2, is: []error{ErrConfig},
			text: []string{"app.toml:2: toml: line 2", "to end table name"},
		},
		{
			name:  "duplicate key",
			toml:  "[template]\nsrc = \"a\"\nsrc = \"b\"\n",
			field: "src", line: 3, is: []error{ErrConfig},
			text: []string{"has already been defined"},
		},
		{
			name:  "mode as a number",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nmode = 0644\n",
			field: "mode", line: 4, is: []error{ErrConfig},
			text: []string{"app.toml:4: mode:", `mode must be a string, such as mode = "0644"`},
		},
		{
			name:  "mode as a decimal number",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nmode = 644\n",
			field: "mode", line: 4, is: []error{ErrConfig},
			text: []string{"incompatible types", `mode must be a string`},
		},
		{
			name:  "keys as a string",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nkeys = \"/db\"\n",
			field: "keys", line: 4, is: []error{ErrConfig},
			text: []string{"keys must be a list of strings"},
		},
		{
			name:  "missing src",
			toml:  "[template]\ndest = \"/x\"\nkeys = [\"/\"]\n",
			field: "src", is: []error{ErrConfig, ErrEmptySrc},
			text: []string{"app.toml: src: empty src template"},
		},
		{
			name:  "no template table",
			toml:  "[templates]\nsrc = \"app.tmpl\"\n",
			field: "src", is: []error{ErrConfig, ErrEmptySrc, ErrEmptyDest},
		},
		{
			name:  "missing dest",
			toml:  "[template]\nsrc = \"app.tmpl\"\n",
			field: "dest", is: []error{ErrConfig, ErrEmptyDest},
			text: []string{"app.toml: dest: empty dest"},
		},
		{
			name:  "bad mode",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nmode = \"rw-r--r--\"\n",
			field: "mode", is: []error{ErrConfig, strconv.ErrSyntax},
			text: []string{`mode: must be a number such as "0644", got "rw-r--r--"`},
		},
		{
			name:  "negative uid",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nuid = -5\n",
			field: "uid", is: []error{ErrConfig},
			text: []string{"uid: must be 0 or more, got -5"},
		},
		{
			name:  "bad duration",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nmin_reload_interval = \"10\"\n",
			field: "min_reload_interval", is: []error{ErrConfig},
			text: []string{`min_reload_interval: invalid duration "10"`},
		},
		{
			name:  "bad output format",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\noutput_format = \"ini\"\n",
			field: "output_format", is: []error{ErrConfig},
			text: []string{`unknown format "ini" (supported: json, toml, xml, yaml, yml)`},
		},
		{
			name:  "bad check_cmd",
			toml:  "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\ncheck_cmd = \"nginx -t -c {{.src\"\n",
			field: "check_cmd", is: []error{ErrConfig},
			text: []string{"check_cmd: invalid command template"},
		},
		{
			name: "missing template",
			toml: goodTOML, tmpl: "-",
			field: "src", is: []error{ErrConfig, fs.ErrNotExist},
			text: []string{"src: missing template", filepath.Join("templates", "app.tmpl")},
		},
		{
			name: "unknown function",
			toml: goodTOML, tmpl: "a\nb\n{{nope \"/x\"}}\n",
			field: "src", is: []error{ErrConfig, ErrTemplate},
			text: []string{`app.tmpl:3: template: app.tmpl:3: function "nope" not defined`},
		},
		{
			name: "template syntax",
			toml: goodTOML, tmpl: "{{range getvs \"/x/*\"}}\n",
			field: "src", is: []error{ErrConfig, ErrTemplate},
			text: []string{"unexpected EOF"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"conf.d/app.toml": tc.toml}
			if tc.tmpl == "" {
				files["templates/app.tmpl"] = "ok\n"
			} else if tc.tmpl != "-" {
				files["templates/app.tmpl"] = tc.tmpl
			}
			dir := writeConfdir(t, files)
			rs, err := LoadConfdir(dir)
			if err == nil {
				t.Fatal("no error")
			}
			if len(rs) != 0 {
				t.Errorf("got %d resources, want none", len(rs))
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not match %v", err, target)
				}
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError", err)
			}
			if ce.File != filepath.Join(dir, "conf.d", "app.toml") {
				t.Errorf("File = %q", ce.File)
			}
			if ce.Field != tc.field {
				t.Errorf("Field = %q, want %q", ce.Field, tc.field)
			}
			if ce.Line != tc.line {
				t.Errorf("Line = %d, want %d", ce.Line, tc.line)
			}
			for _, s := range tc.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestLoadKeepsGoodResources(t *testing.T) {
	dir := writeConfdir(t, map[string]string{
		"conf.d/a.toml":      goodTOML,
		"conf.d/b.toml":      "[template]\ndest = \"/x\"\n",
		"conf.d/c.toml":      strings.Replace(goodTOML, "app.tmpl", "c.tmpl", 1),
		"conf.d/d.toml":      strings.Replace(goodTOML, "app.tmpl", "d.tmpl", 1),
		"templates/app.tmpl": "a\n",
		"templates/c.tmpl":   "{{getv}\n",
		"templates/d.tmpl":   "d\n",
	})
	rs, err := LoadConfdir(dir)
	if len(rs) != 2 || filepath.Base(rs[0].File) != "a.toml" || filepath.Base(rs[1].File) != "d.toml" {
		t.Fatalf("resources: %+v", rs)
	}
	var ces []*ConfigError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("%T in the joined error", e)
		}
		ces = append(ces, ce)
	}
	if len(ces) != 2 || filepath.Base(ces[0].File) != "b.toml" || filepath.Base(ces[1].File) != "c.toml" {
		t.Fatalf("errors: %v", err)
	}
}

func TestLoadConfdirLayout(t *testing.T) {
	t.Run("missing conf.d", func(t *testing.T) {
		_, err := LoadConfdir(filepath.Join(t.TempDir(), "nothing"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("walk", func(t *testing.T) {
		dir := writeConfdir(t, map[string]string{
			"conf.d/z.toml":                   goodTOML,
			"conf.d/deep/er/a.toml":           goodTOML,
			"conf.d/plaintoml":                goodTOML, // confd's pattern is "*toml"
			"conf.d/README.md":                "not a resource",
			"conf.d/y.toml/inner.toml":        goodTOML, // a directory named *toml is walked, not loaded
			"conf.d/..2024_01_01/hidden.toml": goodTOML, // Kubernetes volume internals
			"templates/app.tmpl":              "x\n",
		})
		target := filepath.Join(dir, "conf.d", "z.toml")
		if err := os.Symlink(target, filepath.Join(dir, "conf.d", "link.toml")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "templates"), filepath.Join(dir, "conf.d", "dirlink.toml")); err != nil {
			t.Fatal(err)
		}
		rs, err := LoadConfdir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rs {
			rel, _ := filepath.Rel(filepath.Join(dir, "conf.d"), r.File)
			got = append(got, rel)
		}
		want := []string{"deep/er/a.toml", "link.toml", "plaintoml", "y.toml/inner.toml", "z.toml"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("loaded %v, want %v", got, want)
		}
	})
}

func TestResourceFields(t *testing.T) {
	rs := loadTestConfdir(t)
	var r Resource
	for _, x := range rs {
		if filepath.Base(x.File) == "store.toml" {
			r = x
		}
	}
	want := TargetSpec{
		Dest:              "/etc/myapp/store.conf",
		Owner:             "nobody",
		Group:             "nogroup",
		UID:               -1,
		GID:               -1,
		Mode:              0o640,
		ModeSet:           true,
		CheckCmd:          "/usr/bin/myapp -t -c {{.src}}",
		ReloadCmd:         "/usr/bin/systemctl reload myapp # {{.dest}}",
		CheckCmdTimeout:   30 * time.Second,
		ReloadCmdTimeout:  time.Minute,
		MinReloadInterval: 10 * time.Second,
		OutputFormat:      "toml",
	}
	if got := r.Target(); !reflect.DeepEqual(got, want) {
		t.Errorf("Target() =\n%+v\nwant\n%+v", got, want)
	}
	if r.Src != "store.tmpl" || r.Template != filepath.Join(testConfdir, "templates", "store.tmpl") {
		t.Errorf("Src %q Template %q", r.Src, r.Template)
	}
	if r.Prefix != "/myapp" || !reflect.DeepEqual(r.Keys, []string{"/database", "/upstream", "/services"}) {
		t.Errorf("Prefix %q Keys %q", r.Prefix, r.Keys)
	}
	if r.Debounce != 500*time.Millisecond {
		t.Errorf("Debounce = %v", r.Debounce)
	}
	if r.Backend != nil || r.UnknownKeys != nil {
		t.Errorf("Backend %v UnknownKeys %v", r.Backend, r.UnknownKeys)
	}

	check, err := r.CheckCommand("/etc/myapp/.store.conf123")
	if err != nil || check != "/usr/bin/myapp -t -c /etc/myapp/.store.conf123" {
		t.Errorf("CheckCommand = %q, %v", check, err)
	}
	reload, err := r.ReloadCommand("/etc/myapp/.store.conf123", r.Dest)
	if err != nil || reload != "/usr/bin/systemctl reload myapp # /etc/myapp/store.conf" {
		t.Errorf("ReloadCommand = %q, %v", reload, err)
	}
	if got, err := (TargetSpec{}).CheckCommand("/x"); got != "" || err != nil {
		t.Errorf("empty CheckCommand = %q, %v", got, err)
	}
	if _, err := (TargetSpec{CheckCmd: "{{.src"}).CheckCommand("/x"); err == nil {
		t.Error("a broken check_cmd expands")
	}
}

func TestResourceModesAndExtras(t *testing.T) {
	tests := []struct {
		mode    string
		want    os.FileMode
		wantSet bool
	}{
		{"", 0, false},
		{"0644", 0o644, true},
		{"0o600", 0o600, true},
		{"0x1ed", 0o755, true},
		// Base 0 like confd: "644" is decimal 644 = 0o1204, of which the
		// file gets the permission bits 0o204.
		{"644", 0o204, true},
		{"04755", 0o755, true},
	}
	for _, tc := range tests {
		toml := goodTOML
		if tc.mode != "" {
			toml += "mode = \"" + tc.mode + "\"\n"
		}
		r := loadOne(t, map[string]string{"conf.d/app.toml": toml, "templates/app.tmpl": "x"})
		if r.Mode != tc.want || r.ModeSet != tc.wantSet {
			t.Errorf("mode %q: got %v set=%v, want %v set=%v", tc.mode, r.Mode, r.ModeSet, tc.want, tc.wantSet)
		}
	}

	r := loadOne(t, map[string]string{
		"conf.d/app.toml":    goodTOML + "check-cmd = \"typo\"\nuid = 0\ngid = 10\n[backend]\nbackend = \"etcd\"\nnodes = [\"http://127.0.0.1:2379\"]\n[other]\nx = 1\n",
		"templates/app.tmpl": "x",
	})
	if !reflect.DeepEqual(r.UnknownKeys, []string{"template.check-cmd", "other", "other.x"}) {
		t.Errorf("UnknownKeys = %q", r.UnknownKeys)
	}
	if r.Backend["backend"] != "etcd" || len(r.Backend["nodes"].([]any)) != 1 {
		t.Errorf("Backend = %v", r.Backend)
	}
	if r.UID != 0 || r.GID != 10 {
		t.Errorf("UID %d GID %d", r.UID, r.GID)
	}
}

func TestOwnership(t *testing.T) {
	uid, gid, err := TargetSpec{UID: -1, GID: -1}.Ownership()
	if err != nil || uid != os.Geteuid() || gid != os.Getegid() {
		t.Errorf("unset: %d %d %v", uid, gid, err)
	}
	uid, gid, err = TargetSpec{UID: 12, GID: 34, Owner: "no-such-user-weft", Group: "no-such-group-weft"}.Ownership()
	if err != nil || uid != 12 || gid != 34 {
		t.Errorf("ids win over names: %d %d %v", uid, gid, err)
	}
	if _, _, err := (TargetSpec{UID: -1, GID: -1, Owner: "no-such-user-weft"}).Ownership(); err == nil || !strings.Contains(err.Error(), "cannot find owner's UID") {
		t.Errorf("unknown owner: %v", err)
	}
	if _, _, err := (TargetSpec{UID: 1, GID: -1, Group: "no-such-group-weft"}).Ownership(); err == nil || !strings.Contains(err.Error(), `group "no-such-group-weft"`) {
		t.Errorf("unknown group: %v", err)
	}
	uid, _, err = TargetSpec{UID: -1, GID: 0, Owner: "root"}.Ownership()
	if err != nil || uid != 0 {
		t.Errorf("root: %d %v", uid, err)
	}
}

func TestPrefixAndSelection(t *testing.T) {
	values := map[string]string{
		"/production/myapp/db/url": "prod",
		"/production/myapp/db":     "db itself",
		"/production/myapp/dbx/y":  "not under /db",
		"/myapp/db/url":            "plain",
		"/production/other/x":      "other",
	}
	tests := []struct {
		name    string
		global  string
		prefix  string
		keys    string
		want    string // Prefix
		selects []string
		store   map[string]string
	}{
		{
			name: "global and resource prefix", global: "/production", prefix: "myapp", keys: `["/db"]`,
			want:    "/production/myapp",
			selects: []string{"/production/myapp/db", "/production/myapp/db/url"},
			store:   map[string]string{"/db": "db itself", "/db/url": "prod"},
		},
		{
			name: "global prefix alone", global: "production/", prefix: "", keys: `["/myapp/db/url", "other"]`,
			want:    "/production",
			selects: []string{"/production/myapp/db/url", "/production/other/x"},
			store:   map[string]string{"/myapp/db/url": "prod", "/other/x": "other"},
		},
		{
			name: "global prefix of slash", global: "/", prefix: "/myapp/", keys: `["db"]`,
			want:    "/myapp",
			selects: []string{"/myapp/db/url"},
			store:   map[string]string{"/db/url": "plain"},
		},
		{
			name: "no keys sees nothing", global: "", prefix: "/production/myapp", keys: `[]`,
			want:  "/production/myapp",
			store: map[string]string{},
		},
		{
			name: "key leaving the prefix", global: "", prefix: "/production/myapp", keys: `["../other"]`,
			want:    "/production/myapp",
			selects: []string{"/production/other/x"},
			store:   map[string]string{"/production/other/x": "other"},
		},
		{
			name: "root key", global: "", prefix: "", keys: `["/"]`,
			want:    "/",
			selects: []string{"/myapp/db/url", "/production/myapp/db", "/production/myapp/db/url", "/production/myapp/dbx/y", "/production/other/x"},
			store:   values,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			toml := "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nprefix = \"" + tc.prefix + "\"\nkeys = " + tc.keys + "\n"
			r := loadOne(t, map[string]string{"conf.d/app.toml": toml, "templates/app.tmpl": "x"}, WithPrefix(tc.global))
			if r.Prefix != tc.want {
				t.Errorf("Prefix = %q, want %q", r.Prefix, tc.want)
			}
			var sel []string
			for _, name := range []string{"/myapp/db/url", "/production/myapp/db", "/production/myapp/db/url", "/production/myapp/dbx/y", "/production/other/x"} {
				if r.Selects(name) {
					sel = append(sel, name)
				}
			}
			if !reflect.DeepEqual(sel, tc.selects) {
				t.Errorf("selects %q, want %q", sel, tc.selects)
			}
			got := map[string]string{}
			st := r.Store(values)
			for _, kv := range mustGetAll(t, st, "*") {
				got[kv.Key] = kv.Value
			}
			for _, pattern := range []string{"/*", "/*/*", "/*/*/*", "/*/*/*/*"} {
				for _, kv := range mustGetAll(t, st, pattern) {
					got[kv.Key] = kv.Value
				}
			}
			if st.Len() != len(tc.store) || !reflect.DeepEqual(got, tc.store) {
				t.Errorf("store %v (%d keys), want %v", got, st.Len(), tc.store)
			}
		})
	}
}

func mustGetAll(t *testing.T, s *Store, pattern string) KVPairs {
	t.Helper()
	kvs, err := s.GetAll(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return kvs
}

func TestStoreNameCollision(t *testing.T) {
	r := loadOne(t, map[string]string{
		"conf.d/app.toml":    "[template]\nsrc = \"app.tmpl\"\ndest = \"/x\"\nprefix = \"/a\"\nkeys = [\"/\", \"../b\"]\n",
		"templates/app.tmpl": `{{getv "/b/x"}}`,
	})
	values := map[string]string{"/a/b/x": "under a", "/b/x": "outside"}
	for range 50 {
		out, err := r.Render(values)
		if err != nil {
			t.Fatal(err)
		}
		// "/a/b/x" sorts before "/b/x", so it wins whatever the map order.
		if string(out) != "under a" {
			t.Fatalf("got %q", out)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name string
		tmpl string
		line int
		is   []error
		msg  string // text/template's (confd's) message, exactly
	}{
		{
			name: "missing key without default",
			tmpl: "line one\nvalue: {{getv \"/nope\"}}\n",
			line: 2, is: []error{ErrTemplate, ErrNotExist},
			msg: `template: app.tmpl:2:9: executing "app.tmpl" at <getv "/nope">: error calling getv: key does not exist: /nope`,
		},
		{
			name: "get of a missing key",
			tmpl: "{{(get \"/db/nope\").Value}}",
			line: 1, is: []error{ErrTemplate, ErrNotExist},
			msg: `template: app.tmpl:1:3: executing "app.tmpl" at <get "/db/nope">: error calling get: key does not exist: /db/nope`,
		},
		{
			name: "division by zero",
			tmpl: "a\nb\nc {{div 1 0}}",
			line: 3, is: []error{ErrTemplate},
			msg: `template: app.tmpl:3:4: executing "app.tmpl" at <div 1 0>: error calling div: division by zero`,
		},
		{
			name: "bad pattern",
			tmpl: "{{gets \"/db/[\"}}",
			line: 1, is: []error{ErrTemplate},
			msg: `template: app.tmpl:1:2: executing "app.tmpl" at <gets "/db/[">: error calling gets: invalid pattern "/db/[": syntax error in pattern`,
		},
		{
			name: "atoi",
			tmpl: "{{atoi (getv \"/db/url\")}}",
			line: 1, is: []error{ErrTemplate},
			msg: `template: app.tmpl:1:2: executing "app.tmpl" at <atoi (getv "/db/url")>: error calling atoi: strconv.Atoi: parsing "pg://db": invalid syntax`,
		},
		{
			name: "json",
			tmpl: "{{json \"[1]\"}}",
			line: 1, is: []error{ErrTemplate},
			msg: `template: app.tmpl:1:2: executing "app.tmpl" at <json "[1]">: error calling json: json: cannot unmarshal array into Go value of type map[string]interface {}`,
		},
		{
			name: "wrong argument type",
			tmpl: "{{add \"1\" 2}}",
			line: 1, is: []error{ErrTemplate},
			msg: `template: app.tmpl:1:6: executing "app.tmpl" at <"1">: expected integer; found "1"`,
		},
	}
	values := map[string]string{"/app/db/url": "pg://db"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := loadOne(t, map[string]string{"conf.d/app.toml": goodTOML, "templates/app.tmpl": tc.tmpl})
			out, err := r.Render(values)
			if err == nil {
				t.Fatalf("rendered %q", out)
			}
			if out != nil {
				t.Errorf("output %q with an error", out)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("%v does not match %v", err, target)
				}
			}
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("%T is not a *TemplateError", err)
			}
			if te.File != r.Template || te.Line != tc.line {
				t.Errorf("File %q Line %d, want %q %d", te.File, te.Line, r.Template, tc.line)
			}
			if te.Err.Error() != tc.msg {
				t.Errorf("message\n got %s\nwant %s", te.Err, tc.msg)
			}
			if want := r.Template + ":" + strconv.Itoa(tc.line) + ": " + tc.msg; err.Error() != want {
				t.Errorf("Error()\n got %s\nwant %s", err, want)
			}
		})
	}
}

func TestRenderMisc(t *testing.T) {
	if _, err := (Resource{}).Render(nil); !errors.Is(err, ErrNotLoaded) {
		t.Errorf("zero Resource: %v", err)
	}
	r := loadOne(t, map[string]string{"conf.d/app.toml": goodTOML, "templates/app.tmpl": "{{getv \"/db\"}}"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.RenderContext(ctx, map[string]string{"/app/db": "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	out, err := r.Render(map[string]string{"/app/db": "x"})
	if err != nil || string(out) != "x" {
		t.Errorf("Render = %q, %v", out, err)
	}
	// A render with no values at all still runs: static text needs no keys.
	r = loadOne(t, map[string]string{"conf.d/app.toml": goodTOML, "templates/app.tmpl": "static\n"})
	if out, err := r.Render(nil); err != nil || string(out) != "static\n" {
		t.Errorf("Render(nil) = %q, %v", out, err)
	}
}

func TestStringValues(t *testing.T) {
	got := StringValues(map[string]any{"/a": "x", "/b": 5, "/c": nil, "/d": true, "/e": 1.5})
	want := map[string]string{"/a": "x", "/b": "5", "/d": "true", "/e": "1.5"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
