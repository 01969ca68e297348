package engine

import (
	"context"
	"testing"
)

// TestControlStructuresMatchGonja renders templates with weft's for, if
// and macro and with gonja's own, and requires the same output or the
// same failure.
func TestControlStructuresMatchGonja(t *testing.T) {
	snippets := map[string]string{
		"row":   `[{{ item }}:{{ loop.index }}/{{ loop.length }}{% set inner = item %}]`,
		"macro": `{% macro tag(x) %}<{{ x }}>{% endmacro %}{{ tag(obj.get('k', 'none')) }}`,
	}
	cases := map[string]string{
		"loop attributes":  `{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }}{{ loop.depth0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }};{% endfor %}`,
		"changed":          `{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}`,
		"else":             `{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}{{ x }}{% else %}filtered{% endfor %}`,
		"filter":           `{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }}{{ loop.last }},{% endfor %}`,
		"pairs":            `{% for k, v in [['a', 1], ['b', 2]] %}{{ k }}={{ v }}{{ loop.previtem }},{% endfor %}|{% for k, v in {'y': 2, 'x': 1}.items() if v > 1 %}{{ k }}{{ v }}{% endfor %}`,
		"dict":             `{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}|{% for k, v in {'b': 1, 'a': 2} %}{{ k }}{{ v }}{% endfor %}`,
		"string":           `{% for c in 'abc' %}{{ c }}{{ loop.index }}{% endfor %}`,
		"nested":           `{% for a in [1, 2] %}{% for b in [3, 4] %}{{ a }}{{ b }}{{ loop.depth }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}`,
		"break continue":   `{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}`,
		"scoping":          `{% set y = 'out' %}{% for x in [1, 2] %}{% if x == 1 %}{% set y = 'in' %}{% endif %}{{ y }}{% set z = x %}{% endfor %}{{ y }}{{ z }}`,
		"if scoping":       `{% if true %}{% set a = 1 %}{% endif %}{% if false %}{% set b = 2 %}{% elif true %}{% set b = 3 %}{% else %}{% set b = 4 %}{% endif %}{{ a }}{{ b }}`,
		"elif else":        `{% for x in [1, 2, 3, 4] %}{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}many{% endif %}{% endfor %}`,
		"list semantics":   `{% set l = [] %}{% for x in [1, 2] %}{% if x %}{% set _ = l.append(x) %}{% endif %}{% endfor %}{{ l }}`,
		"namespace":        `{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] %}{% if x > 1 %}{% set ns.n = ns.n + x %}{% endif %}{% endfor %}{{ ns.n }}`,
		"include in loop":  `{% for item in ['p', 'q'] %}{% include "row" %}{{ inner }}{% endfor %}`,
		"macro defaults":   `{% macro m(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='y') }}{{ m(b=5, a=4) }}`,
		"macro varargs":    `{% macro m(a, *rest, **kw) %}{{ a }}{{ rest }}{{ kw }}{% endmacro %}{{ m(1, 2, 3, k=4) }}`,
		"macro errors":     `{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}`,
		"macro twice":      `{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}`,
		"macro unknown kw": `{% macro m(a) %}{{ a }}{% endmacro %}{{ m(z=2) }}`,
		"macro scope":      `{% set g = 'G' %}{% macro m() %}{{ g }}{% set g = 'local' %}{{ g }}{% endmacro %}{{ m() }}{{ g }}`,
		"macro in loop":    `{% for x in [1, 2] %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %}`,
		"caller":           `{% macro wrap() %}({{ caller() }}){% endmacro %}{% call wrap() %}body{% endcall %}`,
		"recursive":        `{% for x in [[1, [2]], [3]] recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}{% endfor %}`,
		"resources":        `{% for _, i in resources.ingresses.items() %}{% if i.spec.rules %}{% for r in i.spec.rules %}{{ r.host }}{{ loop.last }}{% endfor %}{% endif %}{% endfor %}`,
		"values":           `{% for k, v in values.items() if v %}{{ k }}{% endfor %}`,
		"macro include":    `{% set obj = {'k': 'v'} %}{% include "macro" %}`,
		"loop error":       `{% for x in [1, 0] %}{{ 10 // (x + 1) }}{{ x | log }}{% endfor %}`,
		"if error":         `{% if 'x' | log %}y{% endif %}`,
	}
	in := testInput(t)
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			matchGonja(t, Spec{Snippets: snippets, Outputs: []Template{{Kind: KindMap, Name: "m", Text: text}}}, in)
		})
	}
}

// matchGonja renders spec's one output with the engine's own control
// structures and expressions and with gonja's, and fails unless both give
// the same text and registered errors, or the same error.
func matchGonja(t *testing.T, spec Spec, in Input) {
	t.Helper()
	var outs [2]string
	var errs [2]error
	for i, fast := range []bool{true, false} {
		set, err := compile(spec, fast)
		if err != nil {
			t.Fatalf("fast=%v: %v", fast, err)
		}
		out, err := set.Render(context.Background(), in)
		errs[i] = err
		if err == nil {
			outs[i] = string(out.Files[0].Content)
			for _, e := range out.Errors {
				outs[i] += "|" + e.Message
			}
		}
	}
	if (errs[0] == nil) != (errs[1] == nil) || outs[0] != outs[1] {
		t.Fatalf("weft: %q %v\ngonja: %q %v", outs[0], errs[0], outs[1], errs[1])
	}
	if errs[0] != nil && errs[0].Error() != errs[1].Error() {
		t.Errorf("errors differ:\nweft:  %v\ngonja: %v", errs[0], errs[1])
	}
}
