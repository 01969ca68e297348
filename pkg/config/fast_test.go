package config_test

import (
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// TestValidateFast: validate.fast is on unless a target turns it off.
func TestValidateFast(t *testing.T) {
	for _, tc := range []struct {
		name, validate string
		want           bool
	}{
		{"default", "{kinds: [haproxy]}", true},
		{"on", "{kinds: [haproxy], fast: true}", true},
		{"off", "{kinds: [haproxy], fast: false}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`
targets:
  edge:
    base: /etc/haproxy
    validate: `+tc.validate+`
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "unused"}
`), "/")
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Targets["edge"].Validate.FastPath(); got != tc.want {
				t.Fatalf("FastPath() = %v, want %v", got, tc.want)
			}
		})
	}
}
