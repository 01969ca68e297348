package fieldpath

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		expr      string
		want      []string
		canonical string
	}{
		{"metadata.namespace", []string{"metadata", "namespace"}, "metadata.namespace"},
		{"metadata.labels['kubernetes.io/service-name']", []string{"metadata", "labels", "kubernetes.io/service-name"}, "metadata.labels['kubernetes.io/service-name']"},
		{`metadata.labels["app"]`, []string{"metadata", "labels", "app"}, "metadata.labels.app"},
		{"spec.rules", []string{"spec", "rules"}, "spec.rules"},
		{"type", []string{"type"}, "type"},
		{"metadata.managedFields", []string{"metadata", "managedFields"}, "metadata.managedFields"},
		{"['a.b'].c", []string{"a.b", "c"}, "['a.b'].c"},
		{"a['b']['c']", []string{"a", "b", "c"}, "a.b.c"},
		{`a['it\'s']`, []string{"a", "it's"}, `a['it\'s']`},
		{`a["say \"hi\""]`, []string{"a", `say "hi"`}, `a['say "hi"']`},
		{`a['back\\slash']`, []string{"a", `back\slash`}, `a['back\\slash']`},
		{"a['']", []string{"a", ""}, "a['']"},
		{"data.tls-crt", []string{"data", "tls-crt"}, "data.tls-crt"},
		{"a_1.B2", []string{"a_1", "B2"}, "a_1.B2"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			p, err := Parse(tt.expr)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.expr, err)
			}
			if got := p.Segments(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("segments = %q, want %q", got, tt.want)
			}
			if got := p.String(); got != tt.canonical {
				t.Errorf("String() = %q, want %q", got, tt.canonical)
			}
			again, err := Parse(p.String())
			if err != nil || !again.Equal(p) {
				t.Errorf("round trip of %q: %v, %v", p.String(), again.Segments(), err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		expr   string
		column int
		msg    string
	}{
		{"", 1, "empty expression"},
		{"metadata..name", 10, "expected a field name after '.'"},
		{"metadata.", 10, "found end of expression"},
		{"labels['x", 8, "unterminated quoted key"},
		{"labels['x'", 7, "unclosed '['"},
		{"labels['x'x", 11, "expected ']'"},
		{"labels[x]", 8, "expected a quoted key"},
		{"labels[", 8, "found end of expression"},
		{".metadata", 1, "expected a field name or '['"},
		{"meta data", 5, "expected '.' or '['"},
		{"a.b/c", 4, "expected '.' or '['"},
		{`a['x\`, 5, "unterminated escape"},
		{"a.[b]", 3, "expected a field name after '.'"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := Parse(tt.expr)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want error", tt.expr)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v is not ErrSyntax", err)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not *SyntaxError", err)
			}
			if se.Column != tt.column {
				t.Errorf("column = %d, want %d (%v)", se.Column, tt.column, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			if !strings.Contains(err.Error(), strconv.Quote(tt.expr)) {
				t.Errorf("error %q does not name the expression", err)
			}
		})
	}
}

func object() map[string]any {
	return map[string]any{
		"metadata": map[string]any{
			"name":      "web",
			"namespace": "prod",
			"labels": map[string]any{
				"kubernetes.io/service-name": "web-svc",
				"app":                        "web",
			},
			"annotations":   nil,
			"managedFields": []any{map[string]any{"manager": "kubectl"}},
		},
		"spec": map[string]any{"rules": []any{"r1"}},
		"type": "kubernetes.io/tls",
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		expr  string
		want  any
		found bool
	}{
		{"metadata.namespace", "prod", true},
		{"metadata.labels['kubernetes.io/service-name']", "web-svc", true},
		{`metadata.labels["app"]`, "web", true},
		{"spec.rules", []any{"r1"}, true},
		{"type", "kubernetes.io/tls", true},
		{"metadata.annotations", nil, true},
		{"metadata.annotations.x", nil, false},
		{"metadata.labels.missing", nil, false},
		{"metadata.name.deeper", nil, false},
		{"status.phase", nil, false},
		{"spec.rules.r1", nil, false},
	}
	obj := object()
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			p, err := Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, found := p.Lookup(obj)
			if found != tt.found || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lookup = (%v, %v), want (%v, %v)", got, found, tt.want, tt.found)
			}
		})
	}
	if _, found := (Path{}).Lookup(obj); found {
		t.Error("zero Path found something")
	}
	p, _ := Parse("a")
	if _, found := p.Lookup(nil); found {
		t.Error("Lookup in nil object found something")
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		expr    string
		deleted bool
		check   func(map[string]any) bool
	}{
		{"metadata.managedFields", true, func(o map[string]any) bool {
			md := o["metadata"].(map[string]any)
			_, has := md["managedFields"]
			return !has && md["name"] == "web"
		}},
		{"metadata.labels['kubernetes.io/service-name']", true, func(o map[string]any) bool {
			l := o["metadata"].(map[string]any)["labels"].(map[string]any)
			_, has := l["kubernetes.io/service-name"]
			return !has && l["app"] == "web"
		}},
		{"metadata.annotations", true, func(o map[string]any) bool {
			_, has := o["metadata"].(map[string]any)["annotations"]
			return !has
		}},
		{"type", true, func(o map[string]any) bool { _, has := o["type"]; return !has }},
		{"status.phase", false, func(o map[string]any) bool { return reflect.DeepEqual(o, object()) }},
		{"metadata.name.deeper", false, func(o map[string]any) bool { return reflect.DeepEqual(o, object()) }},
		{"metadata.missing", false, func(o map[string]any) bool { return reflect.DeepEqual(o, object()) }},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			p, err := Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			obj := object()
			if got := p.Delete(obj); got != tt.deleted {
				t.Errorf("Delete = %v, want %v", got, tt.deleted)
			}
			if !tt.check(obj) {
				t.Errorf("object after Delete: %v", obj)
			}
			if p.Delete(obj) {
				t.Error("second Delete reported a deletion")
			}
		})
	}
	if (Path{}).Delete(object()) {
		t.Error("zero Path deleted something")
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"metadata.namespace",
		"metadata.labels['kubernetes.io/service-name']",
		`metadata.labels["app"]`,
		"spec.rules",
		"metadata..name",
		"labels['x",
		"",
		"a.",
		`a['it\'s']['\\']`,
		"['']",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		p, err := Parse(expr)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) error %v is not ErrSyntax", expr, err)
			}
			return
		}
		if p.Len() == 0 {
			t.Fatalf("Parse(%q) returned an empty path without error", expr)
		}
		s := p.String()
		again, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(String()) of %q = %q: %v", expr, s, err)
		}
		if !again.Equal(p) {
			t.Fatalf("round trip of %q: %q != %q", expr, again.Segments(), p.Segments())
		}
		if again.String() != s {
			t.Fatalf("String not canonical: %q then %q", s, again.String())
		}
		// Lookup and Delete never panic on an object built from the path.
		obj := map[string]any{}
		cur := obj
		segs := p.Segments()
		for _, k := range segs[:len(segs)-1] {
			next := map[string]any{}
			cur[k] = next
			cur = next
		}
		cur[segs[len(segs)-1]] = 42
		if v, ok := p.Lookup(obj); !ok || v != 42 {
			t.Fatalf("Lookup(%q) = %v, %v", expr, v, ok)
		}
		if !p.Delete(obj) {
			t.Fatalf("Delete(%q) found nothing", expr)
		}
		if _, ok := p.Lookup(obj); ok {
			t.Fatalf("Lookup(%q) after Delete still finds a value", expr)
		}
	})
}

func TestJSONPathForm(t *testing.T) {
	cases := []struct {
		expr string
		want string // segments joined by |
		err  bool
	}{
		{`{.metadata.name}`, "metadata|name", false},
		{`{.metadata.labels.kubernetes\.io/service-name}`, "metadata|labels|kubernetes.io/service-name", false},
		{`{.metadata.labels['app']}`, "metadata|labels|app", false},
		{`{.items[*].name}`, "", true},
		{`{metadata.name}`, "", true},
		{`{.metadata.name`, "", true},
	}
	for _, tc := range cases {
		p, err := Parse(tc.expr)
		if tc.err {
			if err == nil {
				t.Errorf("Parse(%q) accepted", tc.expr)
			}
			continue
		}
		if err != nil || strings.Join(p.Segments(), "|") != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %s", tc.expr, p.Segments(), err, tc.want)
		}
	}
}

// TestNew builds paths from keys: identifiers dotted, other keys quoted,
// and Parse of the text gives the same path back.
func TestNew(t *testing.T) {
	cases := []struct {
		keys []string
		want string
	}{
		{[]string{"targets", "edge", "deploy"}, "targets.edge.deploy"},
		{[]string{"maps", "../escape.map"}, "maps['../escape.map']"},
		{[]string{"a", "it's"}, `a['it\'s']`},
		{[]string{"labels", "kubernetes.io/name"}, "labels['kubernetes.io/name']"},
	}
	for _, tc := range cases {
		p := New(tc.keys...)
		if got := p.String(); got != tc.want {
			t.Errorf("New(%q) = %s, want %s", tc.keys, got, tc.want)
		}
		back, err := Parse(p.String())
		if err != nil || !back.Equal(p) {
			t.Errorf("Parse(%s) = %v, %v; want the keys %q", p, back.Segments(), err, tc.keys)
		}
	}
}
