package watcher

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

// TestSinkProblem: trouble of a running source is an ERROR and counted;
// an error while the source is being stopped is neither.
func TestSinkProblem(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stopped bool
		want    float64
	}{
		{"running", false, 1},
		{"stopping", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testkit.NewEnv(t, testkit.NATS(t), "w")
			m, err := newMetrics(env.Registry)
			if err != nil {
				t.Fatal(err)
			}
			k := &sink{env: env.Env, source: "manifests", m: m}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.stopped {
				cancel()
			}
			k.Problem(ctx, errors.New("write: context canceled"))
			if got := testkit.CounterValue(t, env.Registry, "weft_watcher_source_errors_total"); got != tc.want {
				t.Errorf("errors counted %v, want %v", got, tc.want)
			}
			if logged := strings.Contains(env.Logs.String(), `"level":"ERROR"`); logged != (tc.want > 0) {
				t.Errorf("ERROR logged %v:\n%s", logged, env.Logs)
			}
		})
	}
}
