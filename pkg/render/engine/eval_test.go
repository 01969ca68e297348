package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExpressionsMatchGonja renders expressions with the engine's own
// evaluation (eval.go, with the engine's set and do) and with gonja's, and
// requires the same output or the same error.
func TestExpressionsMatchGonja(t *testing.T) {
	snippets := map[string]string{
		"inc": `{% if true %}{{ item.name }}{% set inner = item.name ~ '!' %}{{ inner }}{% endif %}`,
	}
	cases := map[string]string{
		"literals":          `{{ 'a' }}{{ 1 }}{{ true }}{{ none }}{{ [1, 'b', none] }}{{ {'a': 1, 'b': [2]} }}{{ 1.5 }}`,
		"names":             `{{ undefined }}{{ values.n }}{{ values['n'] }}{{ values.none }}{{ values.missing }}`,
		"object attributes": `{{ values.obj.k }}{{ values.obj['n'] }}{{ values.obj.missing }}{{ values.obj.get('k') }}{{ values.obj.get('x', 'dflt') }}{{ values.obj.get('x') }}{{ values.withkeys['items'] }}{{ values.obj.keys() }}`,
		"object get errors": `{{ values.obj.get() }}`,
		"store":             `{% for i in resources.ingresses.get_indexed('default') %}{{ i.metadata.name }}{{ i.spec.rules[0].host }}{{ i.get('spec').get('rules')[0].get('host') }}{{ i.spec.rules[-1].http.paths[0].path }}{% endfor %}{{ resources.nope }}{{ resources.get('nope', 'x') }}`,
		"none attribute":    `{{ none.attr }}`,
		"none item":         `{{ none['k'] }}`,
		"none method":       `{{ values.none.get('x') }}`,
		"bad item key":      `{{ values.obj[values.obj] }}`,
		"dicts":             `{% set d = {'a': 1, 'b': [1, 2], 'c': none} %}{{ d.a }}{{ d['b'][1] }}{{ d.b[-1] }}{{ d.b[-2] }}{{ d.c }}{{ d.z }}{{ d }}{{ d.get('a') }}{{ d.items() }}`,
		"lists":             `{% set l = [] %}{% do l.append('x') %}{% do l.append(3) %}{{ l }}{{ l | length }}{{ l[0] }}{{ l[-1] }}{{ l[5] }}{{ 'x' in l }}{{ 'y' not in l }}{{ 3 in l }}{{ l.count('x') }}{{ l.index(3) }}{% for x in l %}{{ x }}{{ loop.index }}{% endfor %}`,
		"list copies":       `{% set a = [1] %}{% set b = a %}{% do b.append(2) %}{% set c = values.list %}{% do c.append('z') %}{{ a }}{{ b }}{{ c }}{{ values.list }}`,
		"list literal in":   `{{ 'IPv4' in ['IPv4', 'IPv6'] }}{{ 'IPv5' in ['IPv4', 'IPv6'] }}{{ 1 in [1, 2] }}{{ 'a' in 'cat' }}{{ 'k' in values.obj }}{{ 'x' in values.list }}{{ none in [none] }}`,
		"strings":           `{{ 'a-b.c' | replace('-', '') | replace('.', '') }}{{ 'ABC' | lower }}{{ '  x ' | trim }}{{ 'abc'.startswith('ab') }}{{ 'abc'.isalnum() }}{{ 'a-c'.isalnum() }}{{ 'a//'.rstrip('/') }}{{ 'abc' | length }}{{ 'é' | length }}{{ 'a b'.split() }}{{ 'abc'.upper() }}{{ 'x'.isascii() }}`,
		"string method err": `{{ 'abc'.nope() }}`,
		"string arg err":    `{{ 'abc'.startswith() }}`,
		"filters":           `{{ none | default('d') }}{{ '' | default('d', true) }}{{ '' | default('d') }}{{ 0 | default(5, true) }}{{ undefined | default({}) }}{{ [] | default([1], true) }}{{ 'x' | default(undefined.y) }}{{ 5 | string }}{{ [3, 1, 2] | sort | join(',') }}{{ ['a', 'a'] | unique | list }}{{ values.list | length }}{{ resources.ingresses | length }}`,
		"default error":     `{{ 'x' | default }}`,
		"default arg error": `{{ 'x' | default(none.a) }}`,
		"filter error":      `{{ 'x' | log }}`,
		"unknown method":    `{{ values.n.nope() }}`,
		"operators":         `{{ 1 + 2 }}{{ 'a' ~ 1 ~ none ~ true }}{{ 7 % 3 }}{{ 2 * 3 }}{{ 5 - 7 }}{{ 1 < 2 }}{{ 2 <= 1 }}{{ 3 > 2.5 }}{{ 'a' < 'b' }}{{ 'b' >= 'a' }}{{ 1 == 1.0 }}{{ 'a' == 'a' }}{{ 'a' == 1 }}{{ none == none }}{{ none == 0 }}{{ true != false }}{{ true == 1 }}{{ 1 and 'x' }}{{ 0 or 'y' }}{{ '' and 1 }}{{ not 5 }}{{ not 0 }}{{ not '' }}{{ not [1] }}{{ 2 ** 3 }}{{ 7 / 2 }}{{ 7 // 2 }}{{ [1] + [2] }}{{ 'ab' * 2 }}{{ 'a' + 'b' }}{{ -3 }}`,
		"operator error":    `{{ 1 + none.x }}`,
		"right error":       `{{ 1 == none.x }}`,
		"tests":             `{{ undefined is defined }}{{ 1 is defined }}{{ none is defined }}{{ 1 is integer }}{{ 'a' is integer }}{{ 'a' is string }}{{ 1 is string }}{{ none is none }}{{ 1 is none }}{{ 3 is odd }}{{ 3 is not integer }}{{ values.obj is mapping }}{{ resources.ingresses is defined }}{{ resources.nope is defined }}`,
		"namespace":         `{% set ns = namespace(a=1, s='x') %}{% set ns.a = ns.a + 1 %}{% set ns.b = none %}{% set ns.s = ns.s ~ 'y' %}{{ ns.a }}{{ ns.b }}{{ ns.b is defined }}{{ ns.s }}`,
		"set forms":         `{% set a = 1 if false else 2 %}{{ a }}{% set b %}blk{{ a }}{% endset %}{{ b }}{% set c = 'x' if a == 2 else 'y' %}{{ c }}`,
		"set item":          `{% set d = {} %}{% set d['k'] = 1 %}{{ d }}`,
		"set read-only":     `{% set values.x = 1 %}`,
		"set error":         `{% set x = 'a' | log %}`,
		"set list item":     `{% set l = [1, 2] %}{% set l[0] = 5 %}{{ l }}`,
		"do error":          `{% do undefined_fn() %}`,
		"do not callable":   `{% do values.n() %}`,
		"calls":             `{{ range(3) }}{{ namespace(a=1).a }}{% set l = [] %}{{ l.append(1) }}{{ l }}{{ register_error('t', 'i', 'm') }}`,
		"call error":        `{{ range('a') }}`,
		"call arg error":    `{{ range(none.x) }}`,
		"macros and safe":   `{% macro m(x) %}<b>{{ x }}</b>{% endmacro %}{{ m(1) | escape }}{{ m('<') }}{{ '<i>' | escape }}{{ '<i>' | safe | escape }}{% set s = m(2) %}{{ s | escape }}{% for x in [m(3)] %}{{ x | escape }}{% endfor %}`,
		"loops":             `{% for x in values.list %}{{ x }}{% endfor %}{% for x in ['a', 'b'] if x != 'a' %}{{ x }}{{ loop.length }}{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}{% for k, v in values.obj.items() %}{{ k }}{{ v }}{% endfor %}{% for x in range(3) %}{{ x }}{{ loop.previtem }}{% endfor %}{% for x in none %}{{ x }}{% else %}none{% endfor %}`,
		"include":           `{% for item in [{'name': 'p'}, {'name': 'q'}] %}{% include "inc" %}{{ inner }}{% endfor %}`,
		"if error":          `{% if none.x.y %}y{% endif %}`,
		"output condition":  `{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}{{ 'a' if false }}`,
		"slices":            `{{ values.list[1:] }}{{ 'abc'[:2] }}`,
		"arithmetic":        `{{ 7 % 3 }}{{ 7.5 // 2 }}{{ 2 * 3.5 }}{{ 1 + 2.5 }}{{ 10 / 4 }}{{ -(2) }}{{ -2.5 }}{{ (1, 'a') }}{{ 'ab' * 3 }}{{ 2 <= 2.0 }}`,
		"get default error": `{{ values.obj.get('k', none.x) }}`,
		"append error":      `{% set l = [] %}{% do l.append(none.x) %}`,
		"method arg error":  `{{ 'abc'.startswith(none.x) }}`,
		"method kwargs":     `{{ 'aaa'.replace('a', 'b', 1) }}{{ 'a b c'.split(maxsplit=1) }}`,
		"set undefined":     `{% set x.y = 1 %}`,
		"list of dicts":     `{% for d in [{'a': 1}, {'a': 2}] %}{{ d.a }}{{ d['a'] }}{{ d.b }}{% endfor %}{{ [1, 2][5] }}{{ [1, 2][-1] }}`,
		"concat":            `{{ 'a' ~ 1 ~ ('b' ~ none) ~ [1] ~ values.obj.k }}{% macro m() %}<m>{% endmacro %}{{ 'x' ~ m() }}{{ {'a': none, 'b': m(), 'c': 'd'} }}{{ 1 == 'a' }}{{ none != 'a' }}{{ 'a' == 'a' }}{{ 'a' != 'b' }}`,
		"concat left error": `{{ 'a' ~ none.x ~ 'b' }}`,
		"concat nested err": `{{ 'a' ~ ('b' ~ none.y) }}`,
		"concat mid error":  `{{ 'a' ~ 'b' ~ none.x ~ 'c' }}`,
		"concat leaf error": `{{ none.x ~ 'a' ~ 'b' }}`,
		"concat long":       `{{ 1 ~ 2 ~ 3 ~ 4 ~ 5 ~ 6 ~ 7 ~ 8 ~ 9 ~ 10 ~ 11 }}`,
		"in literals":       `{{ 'a' in ['a', 'b'] }}{{ 'c' in ['a', 'b'] }}{{ 'a' in ['a', 1] }}{{ 'a' in 'cat' }}{{ values.obj.k in ['v'] }}{{ 'k' in values.obj }}{{ 'x' not in values.list }}{{ 'a' in none.x }}`,
		"filter chains":     `{{ 'A-b.C' | replace('-', '') | lower | replace('.', '') | length }}{{ ' Ab ' | trim | lower }}{{ 'x' | replace('x', 'y') | default('z') }}{{ 'a' | upper | lower }}`,
		"dict keys":         `{% set d = {'a': 1, 'items': 2} %}{{ d.a }}{{ d['items'] }}{{ d.items() }}{{ d | length }}{% for k in d %}{{ k }}{% endfor %}{{ 'a' in d }}`,
		"loop scopes":       `{% for x in [1, 2, 3] %}{% if x == 1 %}{% set y = 'one' %}{% endif %}{{ y }}{% set z = x %}{% endfor %}{{ z }}`,
		"macro kept":        `{% set ns = namespace() %}{% for x in [1, 2] %}{% macro m() %}{{ x }}{% endmacro %}{% if loop.first %}{% set ns.m = m %}{% endif %}{% endfor %}{{ ns.m() }}`,
		"break in if":       `{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}`,
		"other functions":   `{% for x in [1, 1, 2] %}{{ loop.cycle('a', 'b') }}{{ loop.changed(x) }}{% endfor %}{{ gettext('hi') }}{{ dict(a=1) }}{% set c = cycler('p', 'q') %}{{ c.next() }}{{ c.next() }}{% set j = joiner('/') %}{{ j() }}x{{ j() }}`,
		"safe items":        `{% macro m() %}<b>{% endmacro %}{% for x in [m()] + ['<i>'] %}{{ x | escape }}{{ x }}{% endfor %}`,
		"dict error":        `{{ {'a': none.x} }}`,
		"list filters":      `{{ ['b', 'A', 'a', 'B', 'c'] | unique | list }}{{ ['b', 'A', 'a', 'B'] | sort }}{{ ['x', 'y'] | join(', ') }}{{ ['x', 'y'] | join }}{{ [1, 'a'] | join('-') }}{{ [2, 1] | sort }}{{ [1, 1] | unique }}{{ 'ab' | list }}{{ values.list | list }}{% set l = ['q', 'p'] %}{{ l | sort | join }}`,
		"string methods":    `{{ 'aé1'.isalnum() }}{{ 'é'.isascii() }}{{ ''.isalnum() }}{{ 'éa'.startswith('é') }}{{ 'aé'.endswith('é') }}{{ 'a//'.rstrip('/') == 'a' }}{{ 'a//'.rstrip('/') ~ '|' }}{{ 'abc'.startswith('abc', 1) }}{{ 'x'.isalnum(1) }}`,
		"loop filter error": `{% for x in [1, 2] if x.y.z %}{{ x }}{% else %}none{% endfor %}`,
	}
	in := testInput(t)
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			// In an if body: the engine evaluates what its control
			// structures render, gonja the template's top level.
			text := "{% if true %}" + text + "{% endif %}"
			matchGonja(t, Spec{Snippets: snippets, Outputs: []Template{{Kind: KindMap, Name: "m", Text: text}}}, in)
		})
	}
}

// TestMethodReceiverEvaluatedOnce: where gonja evaluates the receiver of a
// string method twice (so `l.pop().upper()` pops two items), the engine
// evaluates it once, as Jinja2 does.
func TestMethodReceiverEvaluatedOnce(t *testing.T) {
	got, err := render(t, nil, `{% if true %}{% set l = ['a', 'b'] %}{{ l.pop().upper() }}{{ l }}{% endif %}`, testInput(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := "B['a']"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestEngineErrors: every error the engine meets while evaluating an
// expression is a render error naming the template and the line, never an
// empty or made-up value. Where Jinja2 raises (ZeroDivisionError,
// TypeError) the engine errors even where gonja itself renders something:
// gonja renders `1 // 0` as -9223372036854775808, `1 / 0` as +Inf,
// `'a' - 1` as -1 and `none + 1` as 1, and panics on `1 % 0`; so these
// cases are not in TestExpressionsMatchGonja. Each case renders at the top
// level, in an if body, in a set, as a macro's default and in a snippet,
// on its third line. The messages
// are in testdata/engine-errors.golden (go test -update rewrites it).
func TestEngineErrors(t *testing.T) {
	cases := []struct {
		name, expr string
		compile    bool // an error when the template compiles
	}{
		{"undefined filter", `1 | nofilter`, true},
		{"integer floor division by zero", `1 // 0`, false},
		{"integer division by zero", `1 / 0`, false},
		{"integer modulo by zero", `1 % 0`, false},
		{"float floor division by zero", `1.5 // 0.0`, false},
		{"float division by zero", `values.n / 0.0`, false},
		{"float modulo by zero", `2.5 % 0`, false},
		{"division by false", `1 / false`, false},
		{"string minus int", `'a' - 1`, false},
		{"none plus int", `none + 1`, false},
		{"string plus int", `'80' + 1`, false},
		{"list minus int", `[1] - 1`, false},
		{"dict times int", `{} * 2`, false},
		{"string times string", `'a' * 'b'`, false},
		{"string power", `'a' ** 2`, false},
		{"string modulo", `'%s' % 'x'`, false},
		{"int lower than string", `1 < 'a'`, false},
		{"none greater than int", `none > 1`, false},
		{"unary minus of a string", `-'a'`, false},
		{"error inside unary minus", `-(1 // 0)`, false},
		{"error inside a tuple", `(1, 1 // 0)`, false},
		{"error in a filter argument", `'x' | default(1 // 0)`, false},
		{"error in a call argument", `range(1 // 0)`, false},
		{"error in a method argument", `'abc'.startswith(1 // 0)`, false},
		{"error in a list item", `[1, 2 % 0]`, false},
		{"error in a dict value", `{'a': 1 // 0}`, false},
		{"error in a slice bound", `values.list[1 // 0:]`, false},
		{"error in a condition", `'a' if 1 // 0 else 'b'`, false},
		{"undefined function", `nofunc()`, false},
		{"unknown method", `values.obj.nomethod()`, false},
		{"unknown test", `1 is nosuchtest`, false},
		{"failed call", `range('x')`, false},
		{"call of a non-callable", `values.n()`, false},
	}
	in := testInput(t)
	var golden strings.Builder
	for _, tc := range cases {
		forms := []struct{ where, text string }{
			{"macro default", "{% macro m(x=(" + tc.expr + ")) %}{{ x }}{% endmacro %}\n\n{{ m() }}\n"},
			{"top level", "a\nb\n{{ " + tc.expr + " }}\n"},
			{"if body", "{% if true %}\n\n{{ " + tc.expr + " }}{% endif %}\n"},
			{"set", "{% if true %}\n\n{% set x = " + tc.expr + " %}{{ x }}{% endif %}\n"},
			{"snippet", `{% include "inc" %}`},
		}
		for _, f := range forms {
			if f.where == "macro default" && (tc.compile || strings.Contains(tc.expr, " if ")) {
				continue // the default is on line 1; gonja does not parse a conditional there
			}
			var snippets map[string]string
			if f.where == "snippet" {
				snippets = map[string]string{"inc": "\n\n{{ " + tc.expr + " }}"}
			}
			got, err := render(t, snippets, f.text, in)
			if err == nil {
				t.Errorf("%s, %s: %q rendered %q, want an error", tc.name, f.where, tc.expr, got)
				continue
			}
			var e *Error
			switch {
			case !errors.As(err, &e) || e.Line != 3:
				t.Errorf("%s, %s: error %v does not name line 3", tc.name, f.where, err)
			case f.where == "snippet" && e.Snippet != "inc" && !(tc.compile && e.Template == "inc"):
				t.Errorf("%s, %s: error %v does not name the snippet", tc.name, f.where, err)
			case f.where != "snippet" && e.Template != "test.map":
				t.Errorf("%s, %s: error %v does not name test.map", tc.name, f.where, err)
			}
			fmt.Fprintf(&golden, "%s, %s: %v\n", tc.name, f.where, err)
		}
	}
	checkGolden(t, filepath.Join("testdata", "engine-errors.golden"), golden.String())
}

// checkGolden compares got with the golden file at path, or rewrites the
// file with -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("messages differ from %s (go test -update rewrites it):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines of want and got that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "- %s\n+ %s\n", a, c)
		}
	}
	return b.String()
}
