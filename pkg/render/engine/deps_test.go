package engine

import (
	"context"
	"fmt"
	"testing"
)

func TestValuesRead(t *testing.T) {
	values := map[string]any{"a": "1", "b": "2", "c": "3"}
	cases := []struct {
		tmpl  string
		out   string
		names string
		all   bool
	}{
		{"{{ values.a }}", "1", "[a]", false},
		{"{{ values['b'] }}{{ values.get('c') }}", "23", "[b c]", false},
		{"{{ values.get('missing', 'x') }}", "x", "[missing]", false},
		{"{% for k, v in values.items() %}{{ k }}{% endfor %}", "abc", "[]", true},
		{"{{ values.keys() | length }}", "3", "[]", true},
		{"none", "none", "[]", false},
	}
	for _, tc := range cases {
		t.Run(tc.tmpl, func(t *testing.T) {
			set, err := Compile(Spec{Outputs: []Template{{Kind: KindConfig, Name: "c", Text: tc.tmpl}}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := set.Render(context.Background(), Input{Values: values})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(out.Files[0].Content); got != tc.out {
				t.Errorf("output %q, want %q", got, tc.out)
			}
			if got := fmt.Sprint(out.ValuesRead); got != tc.names || out.AllValues != tc.all {
				t.Errorf("read %s all=%v, want %s all=%v", got, out.AllValues, tc.names, tc.all)
			}
		})
	}
}
