package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

const fragmentsBase = `
sources: [{name: m, type: manifests, path: m}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress, index_by: ["metadata.namespace"]}
targets:
  edge:
    deploy: {driver: files, dest: /out}
    haproxy_config: {template: "{{ fragments('backends') }}"}
    fragments:
`

func TestFragments(t *testing.T) {
	c, err := config.Parse([]byte(fragmentsBase+`      backends: {for_each: ingresses, template: "backend {{ id }}\n"}
`), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := c.Targets["edge"].Fragments["backends"]
	if f.ForEach != "ingresses" || f.Template != "backend {{ id }}\n" {
		t.Fatalf("fragment = %+v", f)
	}

	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unwatched type", `      backends: {for_each: pods, template: x}
`, []string{`targets.edge.fragments.backends.for_each: "pods" is not a watched resource type`}},
		{"values is not a watched type", `      backends: {for_each: values, template: x}
`, []string{`targets.edge.fragments.backends.for_each: "values" is not a watched resource type`}},
		{"missing for_each", `      backends: {template: x}
`, []string{`targets.edge.fragments.backends.for_each: "" is not a watched resource type`}},
		{"bad name", `      bad.name: {for_each: ingresses, template: x}
`, []string{`targets.edge.fragments['bad.name']: invalid subject token`}},
		{"unknown field", `      backends: {for_each: ingresses, template: x, each: y}
`, []string{`unknown field "each"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(fragmentsBase+tc.yaml), "/")
			if err == nil || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want an invalid configuration", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
