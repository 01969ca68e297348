package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
)

func TestHistoryDefaultsAndOverrides(t *testing.T) {
	const target = "haproxy_config: {template: x}, deploy: {driver: files, dest: /o}"
	cases := []struct {
		name, yaml string
		keep       map[string]int
		maxAge     map[string]time.Duration
	}{
		{"defaults", "targets: {a: {" + target + "}}",
			map[string]int{"a": 20}, map[string]time.Duration{"a": 7 * 24 * time.Hour}},
		{"global", "history: {keep: 3, max_age: 1h}\ntargets: {a: {" + target + "}}",
			map[string]int{"a": 3}, map[string]time.Duration{"a": time.Hour}},
		{"a target overrides one field", "history: {keep: 3, max_age: 1h}\ntargets: {a: {" + target + "}, b: {history: {keep: 9}, " + target + "}}",
			map[string]int{"a": 3, "b": 9}, map[string]time.Duration{"a": time.Hour, "b": time.Hour}},
		{"a target without a global section", "targets: {b: {history: {max_age: 30m}, " + target + "}}",
			map[string]int{"b": 20}, map[string]time.Duration{"b": 30 * time.Minute}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.yaml), "/tmp")
			if err != nil {
				t.Fatal(err)
			}
			for name, keep := range tc.keep {
				h := c.Targets[name].History
				if h.Keep != keep || h.MaxAge.D() != tc.maxAge[name] {
					t.Errorf("target %s history = %+v, want keep %d max_age %s", name, *h, keep, tc.maxAge[name])
				}
			}
		})
	}
}

func TestHistoryProblems(t *testing.T) {
	const target = "haproxy_config: {template: x}, deploy: {driver: files, dest: /o}"
	cases := []struct{ name, yaml, want, notWant string }{
		{"negative keep", "history: {keep: -1}\ntargets: {a: {" + target + "}}", "weft.yaml:1:11: history.keep: must be at least 1, got -1", "targets.a.history"},
		{"negative max age", "history: {max_age: -1h}\ntargets: {a: {" + target + "}}", "history.max_age: must be positive, got -1h0m0s", "targets.a.history"},
		{"longer than the bundle store", "history: {max_age: 200h}\ntargets: {a: {" + target + "}}", "history.max_age: 200h0m0s is longer than the bundle store keeps bundles (168h0m0s)", ""},
		{"a target's own", "targets: {a: {history: {keep: -2, max_age: 999h}, " + target + "}}", "targets.a.history.keep: must be at least 1, got -2", ""},
		{"a target's own max age", "targets: {a: {history: {max_age: 999h}, " + target + "}}", "targets.a.history.max_age: 999h0m0s is longer", ""},
		{"not a duration", "history: {max_age: 7d}\ntargets: {a: {" + target + "}}", "history.max_age", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml), "/tmp")
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Fatalf("got %v: the global section's problem is reported again at %s", err, tc.notWant)
			}
		})
	}
}
