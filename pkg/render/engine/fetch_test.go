package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestFetch(t *testing.T) {
	fetch := func(_ context.Context, typ, ns, name string) (map[string]any, error) {
		if typ == "secrets" && ns == "default" && name == "site" {
			return map[string]any{"data": map[string]any{"tls.crt": "Q0VSVA=="}}, nil
		}
		return nil, errors.New("not found")
	}
	cases := []struct {
		name, tmpl string
		fetch      func(context.Context, string, string, string) (map[string]any, error)
		want, err  string
	}{
		{"body", `{{ fetch("secrets", "default", "site").data["tls.crt"] | b64decode }}`, fetch, "CERT", ""},
		{"missing object", `{{ fetch("secrets", "default", "nope") }}`, fetch, "", "fetch secrets default/nope: not found"},
		{"no on-demand source", `{{ fetch("secrets", "default", "site") }}`, nil, "", "no source keeps objects on demand"},
		{"wrong arity", `{{ fetch("secrets") }}`, fetch, "", "takes exactly 3 arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := Compile(Spec{Outputs: []Template{{Kind: KindConfig, Name: "c", Text: tc.tmpl}}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := set.Render(context.Background(), Input{Fetch: tc.fetch})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(out.Files[0].Content) != tc.want {
				t.Fatalf("got %q, %v; want %q", out.Files[0].Content, err, tc.want)
			}
		})
	}
}
