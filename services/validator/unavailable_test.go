package validator_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/validator/haproxycheck"
)

// withoutHAProxy makes the haproxy binary impossible to find for the test.
func withoutHAProxy(t *testing.T) {
	t.Setenv(haproxycheck.EnvBinary, filepath.Join(t.TempDir(), "haproxy"))
}

// TestKindThatCannotRunIsAnErrorWhenNeeded: on a machine without haproxy,
// a replica fails at start when it is told to serve the haproxy kind
// (--kinds) or a target expects it, saying what is missing, who needs it
// and how to get it; otherwise the other kinds run.
func TestKindThatCannotRunIsAnErrorWhenNeeded(t *testing.T) {
	withoutHAProxy(t)
	templateOnly := strings.Replace(cfgYAML, "kinds: [haproxy, template]", "kinds: [template]", 1)
	cases := []struct {
		name  string
		yaml  string
		kinds []string
		says  []string // in the error; none: Run serves
	}{
		{"a target expects haproxy", cfgYAML, nil, []string{"kind haproxy, which targets edge expect (validate.kinds), cannot run here", "apt-get install haproxy", haproxycheck.EnvBinary}},
		{"--kinds haproxy", templateOnly, []string{"haproxy", "template"}, []string{"kind haproxy cannot run here", "apt-get install haproxy"}},
		{"no target expects haproxy", templateOnly, nil, nil},
		{"--kinds without haproxy", cfgYAML, []string{"template", "syntax"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.yaml), "/")
			if err != nil {
				t.Fatal(err)
			}
			env := testkit.NewEnv(t, testkit.NATS(t), "v1")
			o := validator.Options{Kinds: tc.kinds}
			if tc.says == nil {
				stop := testkit.Run(t, func(ctx context.Context) error { return o.Run(ctx, env.Env, cfg) })
				defer stop()
				testkit.Eventually(t, 20*time.Second, func() error {
					if !strings.Contains(env.Logs.String(), "validator kind not served") && tc.kinds == nil {
						return errors.New("no log line says the haproxy kind is not served")
					}
					return nil
				})
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = o.Run(ctx, env.Env, cfg)
			if !errors.Is(err, validator.ErrKindUnavailable) || !errors.Is(err, haproxycheck.ErrNoBinary) {
				t.Fatalf("Run: %v, want ErrKindUnavailable wrapping haproxycheck.ErrNoBinary", err)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestValidatesWithoutHAProxy: a replica of every kind on a machine without
// haproxy validates a target that does not expect the haproxy kind, and
// announces only the kinds it serves.
func TestValidatesWithoutHAProxy(t *testing.T) {
	withoutHAProxy(t)
	yaml := strings.Replace(cfgYAML, "kinds: [haproxy, template]", "kinds: [syntax, template]", 1)
	f, _ := startWith(t, yaml, validator.Options{})
	v := f.submit(bundle(t, goodCfg, "a.example.com b\n"))
	if !v.OK || !slices.Equal(kindsOf(v), []string{"syntax", "template"}) {
		t.Fatalf("verdict ok=%v (%s) by %v, want accepted by syntax and template", v.OK, v.Reason, kindsOf(v))
	}
	leases, err := f.bus.JS.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		keys, err := leases.ListKeys(context.Background())
		if err != nil {
			return err
		}
		var beats []string
		for k := range keys.Keys() {
			beats = append(beats, k)
		}
		slices.Sort(beats)
		want := []string{msg.KindHeartbeatKey("policy", "v1"), msg.KindHeartbeatKey("syntax", "v1"), msg.KindHeartbeatKey("template", "v1")}
		if !slices.Equal(beats, want) {
			return errors.New("heartbeats " + strings.Join(beats, ", ") + ", want " + strings.Join(want, ", "))
		}
		return nil
	})
}
