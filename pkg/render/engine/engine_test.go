package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/weftio/weft/pkg/render/index"
)

// testIndex holds two ingresses and three endpoint slices.
func testIndex(t *testing.T) *index.Index {
	t.Helper()
	ix, err := index.New([]index.Spec{
		{Type: "ingresses", IndexBy: []string{"metadata.namespace", "metadata.name"}},
		{Type: "endpoints", IndexBy: []string{"metadata.labels['kubernetes.io/service-name']"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := []struct{ typ, id, json string }{
		{"ingresses", "prod/b", `{"metadata":{"namespace":"prod","name":"b","uid":"u-b"},"spec":{"rules":[{"host":"b.example.com"}]}}`},
		{"ingresses", "prod/a", `{"metadata":{"namespace":"prod","name":"a","uid":"u-a"},"spec":{"rules":[{"host":"a.example.com","http":{"paths":[{"path":"/","pathType":"Prefix"}]}}]}}`},
		{"endpoints", "prod/web-1", `{"metadata":{"namespace":"prod","name":"web-1","labels":{"kubernetes.io/service-name":"web"}},"endpoints":[{"addresses":["10.0.0.1"]}]}`},
		{"endpoints", "prod/web-2", `{"metadata":{"namespace":"prod","name":"web-2","labels":{"kubernetes.io/service-name":"web"}},"endpoints":[{"addresses":["10.0.0.2","10.0.0.3"]}]}`},
		{"endpoints", "prod/api-1", `{"metadata":{"namespace":"prod","name":"api-1","labels":{"kubernetes.io/service-name":"api"}},"endpoints":null}`},
	}
	for i, o := range objs {
		obj, err := index.Decode([]byte(o.json))
		if err != nil {
			t.Fatal(err)
		}
		ix.Upsert(o.typ, o.id, uint64(i+1), obj)
	}
	return ix
}

func testInput(t *testing.T) Input {
	return Input{
		Resources: testIndex(t).Stores(),
		Values: map[string]any{
			"none":     nil,
			"empty":    "",
			"n":        80,
			"list":     []any{"x", "y"},
			"obj":      map[string]any{"k": "v", "n": 1},
			"withkeys": map[string]any{"items": "data"},
		},
		Path: seedPath,
	}
}

// render compiles text as one map output (with the given snippets) and
// renders it.
func render(t *testing.T, snippets map[string]string, text string, in Input) (string, error) {
	t.Helper()
	set, err := Compile(Spec{Snippets: snippets, Outputs: []Template{{Kind: KindMap, Name: "test.map", Text: text}}})
	if err != nil {
		return "", err
	}
	out, err := set.Render(context.Background(), in)
	if err != nil {
		return "", err
	}
	return string(out.Files[0].Content), nil
}

type renderCase struct {
	name    string
	text    string
	want    string
	wantErr string // substring of the error; empty when none expected
}

func runCases(t *testing.T, cases []renderCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := render(t, nil, tc.text, testInput(t))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("rendered %q, want error containing %q", got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q does not contain %q", err, tc.wantErr)
				}
				if !errors.Is(err, ErrTemplate) {
					t.Errorf("error %v is not ErrTemplate", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFilters(t *testing.T) {
	runCases(t, []renderCase{
		{name: "log base 2", text: "{{ 8 | log(2) }}", want: "3.0"},
		{name: "log base 10", text: "{{ 100 | log(10) }}", want: "2.0"},
		{name: "log natural", text: "{{ 1 | log }}", want: "0.0"},
		{name: "log keyword base", text: "{{ 0.5 | log(base=2) }}", want: "-1.0"},
		{name: "log of ratio ceil", text: "{{ (11 / 10) | log(2) | round(0, 'ceil') }}", want: "1.0"},
		{name: "log of zero", text: "{{ 0 | log(2) }}", wantErr: "math domain error"},
		{name: "log base one", text: "{{ 5 | log(1) }}", wantErr: "math domain error"},
		{name: "log of string", text: "{{ 'x' | log }}", wantErr: "not a number"},
		{name: "b64decode", text: "{{ 'aGVsbG8=' | b64decode }}", want: "hello"},
		{name: "b64decode unpadded", text: "{{ 'aGVsbG8' | b64decode }}", want: "hello"},
		{name: "b64decode invalid", text: "{{ '!!!' | b64decode }}", wantErr: "b64decode"},
		{name: "b64decode non string", text: "{{ 5 | b64decode }}", wantErr: "not a string"},
		{name: "b64encode", text: "{{ 'hello' | b64encode }}", want: "aGVsbG8="},
		{name: "b64 round trip", text: "{{ 'ünïcode' | b64encode | b64decode }}", want: "ünïcode"},
		{name: "get_path map", text: `{{ "host.map" | get_path("map") }}`, want: "/etc/haproxy/maps/host.map"},
		{name: "get_path file", text: `{{ "400.http" | get_path("file") }}`, want: "/etc/haproxy/files/400.http"},
		{name: "get_path cert", text: `{{ "a.pem" | get_path("cert") }}`, want: "/etc/haproxy/certs/a.pem"},
		{name: "get_path unknown kind", text: `{{ "a" | get_path("disk") }}`, wantErr: `unknown kind "disk"`},
		{name: "get_path no kind", text: `{{ "a" | get_path }}`, wantErr: "get_path"},
		{name: "default boolean", text: `{{ values.empty | default("d", true) }}|{{ values.empty | default("d") }}`, want: "d|"},
		{name: "default none to list", text: `{{ values.none | default([], true) | length }}`, want: "0"},
		{name: "default missing", text: `{{ values.missing | default(80) }}`, want: "80"},
		{name: "replace count", text: `{{ "*.a.*" | replace('*', '', 1) }}`, want: ".a.*"},
		{name: "round ceil", text: "{{ 1.2 | round(0, 'ceil') }}", want: "2.0"},
		{name: "max mixed", text: "{{ [0, -1.5] | max }} {{ [0, 2.0] | max }}", want: "0 2.0"},
		{name: "power and int", text: "{{ 2 ** 3 }} {{ (2 ** 3) | int }} {{ 10 * (2 ** 1.0) | int }}", want: "8.0 8 20"},
		{name: "length of store", text: "{{ resources.ingresses | length }} {{ resources.endpoints | count }}", want: "2 3"},
		{name: "length of list", text: "{{ values.list | length }}", want: "2"},
		{name: "selectattr defined", text: `{% for r in resources.ingresses.get("prod/a").spec.rules | selectattr("http", "defined") %}{{ r.host }}{% endfor %}`, want: "a.example.com"},
		{name: "selectattr in", text: `{% set types = ["Exact"] %}{{ [{"t": "Exact"}, {"t": "Prefix"}] | selectattr("t", "in", types) | length }}`, want: "1"},
		{name: "unknown filter at runtime name", text: "{{ values.n }}", want: "80"},
	})
}

func TestGetPathWithoutResolver(t *testing.T) {
	in := testInput(t)
	in.Path = nil
	_, err := render(t, nil, `{{ "a" | get_path("map") }}`, in)
	if err == nil || !strings.Contains(err.Error(), "no path resolver") {
		t.Fatalf("err = %v", err)
	}
	in.Path = func(Kind, string) (string, error) { return "", errors.New("boom") }
	_, err = render(t, nil, `{{ "a" | get_path("map") }}`, in)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v", err)
	}
}

func TestRange(t *testing.T) {
	runCases(t, []renderCase{
		{name: "stop", text: "{{ range(3) }}", want: "[0, 1, 2]"},
		{name: "start stop", text: "{{ range(1, 4) }}", want: "[1, 2, 3]"},
		{name: "negative step", text: "{{ range(5, 0, -2) }}", want: "[5, 3, 1]"},
		{name: "empty", text: "{{ range(0) }}{{ range(3, 1) }}", want: "[][]"},
		{name: "loop", text: "{% for i in range(1, 4) %}{{ loop.index0 }}:{{ i }} {% endfor %}", want: "0:1 1:2 2:3 "},
		{name: "zero step", text: "{{ range(1, 2, 0) }}", wantErr: "step must not be zero"},
		{name: "not integer", text: "{{ range('a') }}", wantErr: "must be integers"},
		{name: "too large", text: "{{ range(100000000) }}", wantErr: "exceeds the limit"},
	})
}

func TestListMethods(t *testing.T) {
	runCases(t, []renderCase{
		{name: "append in nested loops", text: "{% set l = [] %}{% for i in [1, 2] %}{% for j in [3] %}{% set _ = l.append(i * j) %}{% endfor %}{% endfor %}{{ l }}", want: "[3, 6]"},
		{name: "append via do", text: "{% set l = [] %}{% for i in range(3) %}{% do l.append(i) %}{% endfor %}{{ l | length }} {{ l[2] }}", want: "3 2"},
		{name: "append dict and read back", text: "{% set l = [] %}{% do l.append({'name': 'a', 'port': 80}) %}{{ l[0].name }}:{{ l[0].port }}", want: "a:80"},
		{name: "extend", text: "{% set l = [1] %}{% do l.extend([2, 3]) %}{{ l }}", want: "[1, 2, 3]"},
		{name: "insert", text: "{% set l = [1, 3] %}{% do l.insert(1, 2) %}{% do l.insert(-10, 0) %}{{ l }}", want: "[0, 1, 2, 3]"},
		{name: "pop", text: "{% set l = [1, 2, 3] %}{{ l.pop() }} {{ l.pop(0) }} {{ l }}", want: "3 1 [2]"},
		{name: "pop empty", text: "{% set l = [] %}{{ l.pop() }}", wantErr: "pop index out of range"},
		{name: "remove", text: "{% set l = ['a', 'b', 'a'] %}{% do l.remove('a') %}{{ l }}", want: "['b', 'a']"},
		{name: "remove missing", text: "{% set l = [] %}{% do l.remove('a') %}", wantErr: "not in list"},
		{name: "index and count", text: "{% set l = ['a', 'b', 'a'] %}{{ l.index('b') }} {{ l.count('a') }}", want: "1 2"},
		{name: "clear", text: "{% set l = [1] %}{% do l.clear() %}{{ l }}", want: "[]"},
		{name: "copy is independent", text: "{% set l = [1] %}{% set c = l.copy() %}{% do c.append(2) %}{{ l }} {{ c }}", want: "[1] [1, 2]"},
		{name: "alias shares", text: "{% set l = [1] %}{% set m = l %}{% do m.append(2) %}{{ l }}", want: "[1, 2]"},
		{name: "reverse", text: "{% set l = [1, 2, 3] %}{% do l.reverse() %}{{ l }}", want: "[3, 2, 1]"},
		{name: "iterate and in", text: "{% set l = ['Exact'] %}{% for x in l %}{{ x }}{% endfor %} {{ 'Exact' in l }}", want: "Exact True"},
		{name: "set copies data lists", text: "{% set l = values.list %}{% do l.append('z') %}{{ l }} {{ values.list }}", want: "['x', 'y', 'z'] ['x', 'y']"},
		{name: "plain list append does not touch data", text: "{% for x in [values.list] %}{% do x.append('z') %}{{ x }}{% endfor %} {{ values.list }}", want: "['x', 'y', 'z'] ['x', 'y']"},
		{name: "plain list reverse does not touch data", text: "{% for x in [values.list] %}{% do x.reverse() %}{{ x }}{% endfor %} {{ values.list }}", want: "['y', 'x'] ['x', 'y']"},
		{name: "unknown list method", text: "{% set l = [] %}{{ l.frob() }}", wantErr: "unknown method 'frob'"},
		{name: "unknown list attribute", text: "{% set l = [] %}{{ l.frob }}", want: ""},
		{name: "append arity", text: "{% set l = [] %}{% do l.append() %}", wantErr: "append() takes exactly one argument"},
		{name: "block set stays string", text: "{% set s %}a{% endset %}{{ s }}", want: "a"},
		{name: "concatenation", text: "{% set l = [1] %}{{ l + [2] }}", want: "[1, 2]"},
	})
}

func TestResourceAccess(t *testing.T) {
	runCases(t, []renderCase{
		{name: "items in id order", text: "{% for id, ing in resources.get('ingresses', {}).items() %}{{ id }}={{ ing.metadata.name }} {% endfor %}", want: "prod/a=a prod/b=b "},
		{name: "attribute access", text: "{% for id, ing in resources.ingresses.items() %}{{ id }} {% endfor %}", want: "prod/a prod/b "},
		{name: "item access", text: "{{ resources['ingresses']['prod/b'].metadata.uid }}", want: "u-b"},
		{name: "get_indexed", text: "{% for s in resources.get('endpoints', {}).get_indexed('web') %}{{ s.metadata.name }} {% endfor %}", want: "web-1 web-2 "},
		{name: "get_indexed prefix of two", text: "{{ resources.ingresses.get_indexed('prod') | length }} {{ resources.ingresses.get_indexed('prod', 'b') | length }} {{ resources.ingresses.get_indexed() | length }}", want: "2 1 2"},
		{name: "get_indexed none key", text: "{{ resources.endpoints.get_indexed(values.none) | length }}", want: "0"},
		{name: "store get", text: "{{ resources.ingresses.get('prod/a').metadata.uid }} {{ resources.ingresses.get('x', 'dflt') }} {{ resources.ingresses.get('x') }}", want: "u-a dflt "},
		{name: "store keys values len", text: "{{ resources.ingresses.keys() }} {{ resources.ingresses.values() | length }} {{ resources.ingresses.len() }}", want: "['prod/a', 'prod/b'] 2 2"},
		{name: "missing type default", text: "{% for _, x in resources.get('secrets', {}).items() %}x{% endfor %}none", want: "none"},
		{name: "resources keys and items", text: "{{ resources.keys() }} {% for name, st in resources.items() %}{{ name }}:{{ st.len() }} {% endfor %}", want: "['endpoints', 'ingresses'] endpoints:3 ingresses:2 "},
		{name: "store string", text: "{{ resources.ingresses }}", want: "<store ingresses: 2 objects>"},
		{name: "store unknown attribute", text: "{{ resources.ingresses.nope }}", want: ""},
		{name: "store unknown method", text: "{{ resources.ingresses.nope() }}", wantErr: "is not callable"},
		{name: "dict get default", text: "{{ values.obj.get('k', 'd') }} {{ values.obj.get('x', 'd') }} {{ values.obj.get('x') }}", want: "v d "},
		{name: "null field with default", text: "{% for s in resources.endpoints.get_indexed('api') %}{% for e in s.get('endpoints') | default([], true) %}x{% endfor %}empty{% endfor %}", want: "empty"},
		{name: "object methods", text: "{% set o = resources.ingresses.get('prod/a') %}{{ o.keys() }} {{ o.metadata.get('name') }} {{ o.metadata.get('x', 'd') }} {% for k, v in o.metadata.items() %}{{ k }}={{ v }};{% endfor %} {{ o.metadata.values() | length }}", want: "['metadata', 'spec'] a d name=a;namespace=prod;uid=u-a; 3"},
		{name: "maps inside lists answer get", text: "{% for r in resources.ingresses['prod/a'].spec.rules %}{% for p in r.get('http').get('paths', []) %}{{ p.get('pathType') }}{% endfor %}{% endfor %}", want: "Prefix"},
		{name: "item access wraps too", text: "{{ resources.ingresses['prod/a']['spec']['rules'][0].get('host') }}", want: "a.example.com"},
		{name: "method name wins over key, item access reaches key", text: "{% set o = {'items': 'data'} %}{{ values.withkeys['items'] }} {{ values.withkeys.items() | length }}", want: "data 1"},
		{name: "iterating an object", text: "{% for k in values.obj %}{{ k }}{% endfor %}", want: "kn"},
		{name: "resource data is read-only", text: "{% set o = resources.ingresses.get('prod/a') %}{% set o.spec = 1 %}", wantErr: "read-only"},
		{name: "values are read-only", text: "{% set values['n'] = 1 %}", wantErr: "read-only"},
		{name: "namespace is writable", text: "{% set ns = namespace(n=1) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", want: "4"},
		{name: "integers stay integers", text: "{{ values.obj.n }} {{ values.n + 1 }}", want: "1 81"},
		{name: "iterating a store directly", text: "{% for x in resources.ingresses %}{{ x }}{% endfor %}", wantErr: "panic while rendering"},
	})
}

func TestRegisterError(t *testing.T) {
	text := `{% for _, ing in resources.ingresses.items() %}` +
		`{% for rule in ing.spec.rules %}{% if not rule.http %}{% do register_error('ingresses', ing.metadata.uid, 'rule without http') %}{% endif %}{% endfor %}` +
		`{% do register_error('ingresses', 'u-x', 'twice') %}{% endfor %}{{ register_error('a', 'b', 'c') }}ok`
	set, err := Compile(Spec{Outputs: []Template{
		{Kind: KindConfig, Name: "haproxy.cfg", Text: text},
		{Kind: KindMap, Name: "m", Text: "{% do register_error('maps', 'm', 'from a map') %}"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := set.Render(context.Background(), testInput(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []RegisteredError{
		{Type: "ingresses", ID: "u-x", Message: "twice"},
		{Type: "ingresses", ID: "u-b", Message: "rule without http"},
		{Type: "a", ID: "b", Message: "c"},
		{Type: "maps", ID: "m", Message: "from a map"},
	}
	if !reflect.DeepEqual(out.Errors, want) {
		t.Errorf("Errors = %+v\nwant %+v", out.Errors, want)
	}
	if got := string(out.Files[0].Content); got != "ok" {
		t.Errorf("content %q", got)
	}
	// A second render starts with no errors.
	out2, err := set.Render(context.Background(), testInput(t))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out2.Errors, want) {
		t.Errorf("second render Errors = %+v", out2.Errors)
	}
	_, err = render(t, nil, "{% do register_error('a') %}", testInput(t))
	if err == nil || !strings.Contains(err.Error(), "takes exactly 3 arguments") {
		t.Errorf("arity error = %v", err)
	}
}

func TestIncludes(t *testing.T) {
	snippets := map[string]string{
		"name":     "ing_{{ ing }}\n",
		"local":    "{% set leaked = 'yes' %}{{ loopvar | default('none') }}",
		"globals":  "{{ resources.ingresses.len() }}/{{ values.n }}/{{ secret | default('hidden') }}",
		"nested":   "<{% include 'name' %}>",
		"self":     "{% include 'self' %}",
		"dynamic":  "{% include values.which %}",
		"optional": "[{% include 'nope' ignore missing %}]",
	}
	in := testInput(t)
	in.Values["which"] = "name"
	tests := []struct {
		name, text, want string
	}{
		{"trailing newline of snippet dropped", "{% set ing = 'a' %}{% include 'name' %} x\n", "ing_a x\n"},
		{"with context sees loop variables", "{% for loopvar in [1, 2] %}{% include 'local' with context %}{% endfor %}", "12"},
		{"set inside include does not leak", "{% include 'local' %}{{ leaked | default('no') }}", "noneno"},
		{"without context sees globals only", "{% set secret = 's' %}{% include 'globals' without context %}", "2/80/hidden"},
		{"nested", "{% set ing = 'n' %}{% include 'nested' %}", "<ing_n>"},
		{"dynamic name", "{% set ing = 'd' %}{% include 'dynamic' %}", "ing_d"},
		{"ignore missing", "{% include 'optional' %}", "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := render(t, snippets, tt.text, in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("recursion is bounded", func(t *testing.T) {
		_, err := render(t, snippets, "{% include 'self' %}", in)
		var e *Error
		if !errors.As(err, &e) || e.Snippet != "self" || !strings.Contains(e.Message, "nested deeper than") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("dynamic missing", func(t *testing.T) {
		in := testInput(t)
		in.Values["which"] = "absent"
		_, err := render(t, snippets, "{% include 'dynamic' %}", in)
		var e *Error
		if !errors.As(err, &e) || e.Snippet != "dynamic" || !strings.Contains(e.Message, `include of unknown snippet "absent"`) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestOutputsKeepTrailingNewline(t *testing.T) {
	set, err := Compile(Spec{Outputs: []Template{
		{Kind: KindFile, Name: "a", Text: "line\n"},
		{Kind: KindFile, Name: "b", Text: "no newline"},
		{Kind: KindConfig, Name: "c", Text: "{% for i in range(2) %}\n{{ i }}\n{%- endfor %}\n"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := set.Render(context.Background(), Input{})
	if err != nil {
		t.Fatal(err)
	}
	want := []File{
		{Kind: KindFile, Name: "a", Content: []byte("line\n")},
		{Kind: KindFile, Name: "b", Content: []byte("no newline")},
		{Kind: KindConfig, Name: "c", Content: []byte("\n0\n1\n")},
	}
	if !reflect.DeepEqual(out.Files, want) {
		t.Errorf("Files = %q", out.Files)
	}
	if got := set.Outputs(); len(got) != 3 || got[2].Name != "c" {
		t.Errorf("Outputs = %v", got)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name     string
		spec     Spec
		template string
		snippet  string
		line     int
		msg      string
		text     string // substring of Error()
	}{
		{
			name:     "syntax error names template and line",
			spec:     Spec{Outputs: []Template{{Kind: KindMap, Name: "maps/host.map", Text: "a\nb\nc\n{{ x + }}\n"}}},
			template: "maps/host.map", line: 4, msg: "expected either a number",
			text: `template "maps/host.map" line 4: `,
		},
		{
			name:     "unclosed block",
			spec:     Spec{Outputs: []Template{{Kind: KindConfig, Name: "haproxy.cfg", Text: "global\n{% for x in y %}\n"}}},
			template: "haproxy.cfg", line: 3, msg: "expected tag else or endfor",
		},
		{
			name:     "empty if",
			spec:     Spec{Outputs: []Template{{Kind: KindConfig, Name: "haproxy.cfg", Text: "global\n{% if %}x{% endif %}"}}},
			template: "haproxy.cfg", line: 2, msg: "expected either a number",
		},
		{
			name:     "syntax error in snippet",
			spec:     Spec{Snippets: map[string]string{"backend-name": "ok\n{% if x %}"}, Outputs: []Template{{Kind: KindConfig, Name: "haproxy.cfg", Text: "x"}}},
			template: "backend-name", snippet: "backend-name", line: 2, msg: "Unexpected EOF",
			text: `snippet "backend-name" line 2: `,
		},
		{
			name:     "unknown filter",
			spec:     Spec{Outputs: []Template{{Kind: KindMap, Name: "host.map", Text: "x\n{{ a | frobnicate(1) }}"}}},
			template: "host.map", line: 2, msg: `no filter named "frobnicate"`,
		},
		{
			name:     "include of missing snippet",
			spec:     Spec{Snippets: map[string]string{"a": "a"}, Outputs: []Template{{Kind: KindMap, Name: "host.map", Text: "\n\n{% include \"backend-nam\" %}"}}},
			template: "host.map", line: 3, msg: `include of unknown snippet "backend-nam"`,
		},
		{
			name:     "malformed include",
			spec:     Spec{Outputs: []Template{{Kind: KindMap, Name: "host.map", Text: "{% include 'a' with %}"}}},
			template: "host.map", line: 1, msg: "expected 'context' after 'with'",
		},
		{
			name:     "unknown kind",
			spec:     Spec{Outputs: []Template{{Kind: "disk", Name: "x", Text: "x"}}},
			template: "x", msg: `unknown kind "disk"`,
		},
		{
			name:     "duplicate output",
			spec:     Spec{Outputs: []Template{{Kind: KindMap, Name: "x", Text: "x"}, {Kind: KindMap, Name: "x", Text: "y"}}},
			template: "x", msg: `map "x" declared twice`,
		},
		{
			name: "unnamed output",
			spec: Spec{Outputs: []Template{{Kind: KindMap, Text: "x"}}},
			msg:  "output 0 has no name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.spec)
			if err == nil {
				t.Fatal("Compile succeeded")
			}
			if !errors.Is(err, ErrTemplate) {
				t.Errorf("%v is not ErrTemplate", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not *Error", err)
			}
			if e.Template != tt.template || e.Snippet != tt.snippet || e.Line != tt.line {
				t.Errorf("got template %q snippet %q line %d, want %q %q %d (%v)", e.Template, e.Snippet, e.Line, tt.template, tt.snippet, tt.line, err)
			}
			if !strings.Contains(e.Message, tt.msg) {
				t.Errorf("message %q does not contain %q", e.Message, tt.msg)
			}
			if tt.text != "" && !strings.HasPrefix(err.Error(), tt.text) {
				t.Errorf("Error() = %q, want prefix %q", err.Error(), tt.text)
			}
		})
	}
}

func TestCompileReportsEveryBrokenTemplate(t *testing.T) {
	_, err := Compile(Spec{
		Snippets: map[string]string{"b": "{{ x + }}", "a": "{% if %}"},
		Outputs:  []Template{{Kind: KindMap, Name: "m", Text: "{{ ) }}"}, {Kind: KindMap, Name: "ok", Text: "fine"}},
	})
	if err == nil {
		t.Fatal("Compile succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], `snippet "a"`) || !strings.HasPrefix(lines[1], `snippet "b"`) || !strings.HasPrefix(lines[2], `template "m"`) {
		t.Errorf("errors not reported in order:\n%v", err)
	}
}

func TestRenderErrors(t *testing.T) {
	snippets := map[string]string{
		"outer": "one\n{% include 'inner' %}",
		"inner": "a\nb\n{{ values.none.upper() }}",
		"loop":  "{% for x in resources.ingresses %}{% endfor %}",
	}
	tests := []struct {
		name    string
		text    string
		snippet string
		line    int
		msg     string
	}{
		{"method on None names output and line", "ok\n\n{% for _, ing in resources.ingresses.items() %}\n{{ ing.status.lb.upper() }}\n{% endfor %}", "", 4, "Can't use Getitem on None"},
		{"method on None", "\n{{ values.none.upper() }}", "", 2, "cannot call method 'upper' on None"},
		{"failure inside nested snippet", "x\n{% include 'outer' %}", "inner", 3, "cannot call method 'upper' on None"},
		{"panic inside snippet", "{% include 'loop' %}", "loop", 0, "panic while rendering"},
		{"bad filter argument", "\n{{ 'a' | replace(1) }}", "", 2, "invalid call to filter 'replace'"},
		{"undefined function", "{{ nothing() }}", "", 1, "is not callable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, snippets, tt.text, testInput(t))
			if err == nil {
				t.Fatal("render succeeded")
			}
			if !errors.Is(err, ErrTemplate) {
				t.Errorf("%v is not ErrTemplate", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not *Error", err)
			}
			if e.Template != "test.map" || e.Kind != KindMap || e.Snippet != tt.snippet || e.Line != tt.line {
				t.Errorf("got %s %q snippet %q line %d, want test.map %q %d (%v)", e.Kind, e.Template, e.Snippet, e.Line, tt.snippet, tt.line, err)
			}
			if !strings.Contains(e.Message, tt.msg) {
				t.Errorf("message %q does not contain %q", e.Message, tt.msg)
			}
			if e.Err == nil {
				t.Error("no underlying error")
			}
		})
	}
}

func TestRenderReportsEveryFailingOutput(t *testing.T) {
	set, err := Compile(Spec{Outputs: []Template{
		{Kind: KindMap, Name: "a", Text: "{{ values.none.x() }}"},
		{Kind: KindMap, Name: "ok", Text: "fine"},
		{Kind: KindFile, Name: "b", Text: "{{ 0 | log }}"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := set.Render(context.Background(), Input{})
	if out != nil || err == nil {
		t.Fatalf("out %v, err %v", out, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `template "a"`) || !strings.Contains(msg, `template "b"`) || strings.Contains(msg, `"ok"`) {
		t.Errorf("error %q", msg)
	}
}

func TestRenderCanceled(t *testing.T) {
	set, err := Compile(Spec{Snippets: map[string]string{"s": "x"}, Outputs: []Template{{Kind: KindMap, Name: "a", Text: "{% include 's' %}"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = set.Render(ctx, Input{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTemplate) {
		t.Fatalf("err = %v", err)
	}
}

// TestConcurrentRender renders one Set from many goroutines (run with -race).
func TestConcurrentRender(t *testing.T) {
	cfg := loadSeedConfig(t)
	set, err := Compile(seedSpec(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ix := seedIndex(t, cfg)
	in := Input{Resources: ix.Stores(), Path: seedPath}
	first, err := set.Render(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				out, err := set.Render(context.Background(), in)
				if err != nil {
					errs <- err
					return
				}
				for j, f := range out.Files {
					if !bytes.Equal(f.Content, first.Files[j].Content) {
						errs <- fmt.Errorf("%s differs between concurrent renders", f.Name)
						return
					}
				}
			}
		}()
	}
	// A writer changes an unrelated object meanwhile.
	for i := 0; i < 50; i++ {
		ix.Upsert("secrets", "prod/tls", uint64(1000+i), map[string]any{"metadata": map[string]any{"namespace": "prod"}, "type": "kubernetes.io/tls"})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
