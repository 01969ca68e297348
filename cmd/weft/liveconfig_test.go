package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/liveconfig"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
)

// TestLiveConfiguration proposes configurations as a ConfigMap would: a good
// one goes live, a broken one is refused with the template and line, and
// the good one keeps running.
func TestLiveConfiguration(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "c")
	good, err := os.ReadFile(quickstart + "/weft.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg0 := loadQuickstart(t)
	testkit.Run(t, func(ctx context.Context) error { return validator.Run(ctx, env.Env, cfg0) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configs, err := liveconfig.Watch(ctx, env.Env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	var st msg.ConfigStatus
	testkit.Eventually(t, 20*time.Second, func() error { // the validator subscribes asynchronously
		st, err = liveconfig.Propose(ctx, env.Env, string(good), "test", 2*time.Second)
		return err
	})
	if !st.OK || st.Active != liveconfig.Hash(string(good)) {
		t.Fatalf("status = %+v", st)
	}
	select {
	case c := <-configs:
		if _, ok := c.Targets["quickstart"]; !ok {
			t.Fatalf("active configuration = %+v", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the activated configuration was not yielded")
	}

	cases := []struct {
		name, yaml, want string
	}{
		{"broken template", strings.Replace(string(good), "# <host><path> -> backend, matched exactly", "{% for %}", 1), `template "exact.map" line 1`},
		{"bad structure", string(good) + "\nunknown_section: 1\n", "unknown field"},
		{"bad index_by", strings.Replace(string(good), `index_by: ["metadata.namespace", "metadata.name"]`, `index_by: ["metadata..name"]`, 1), "metadata..name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := liveconfig.Propose(ctx, env.Env, tc.yaml, "test", 5*time.Second)
			if !errors.Is(err, liveconfig.ErrRejected) || st.OK {
				t.Fatalf("Propose = %+v, %v; want a rejection", st, err)
			}
			if st.Active != liveconfig.Hash(string(good)) {
				t.Fatalf("active = %s, want the good configuration to stay", st.Active)
			}
			found := false
			for _, p := range st.Problems {
				found = found || strings.Contains(p.Message, tc.want)
			}
			if !found {
				t.Fatalf("problems %+v do not mention %q", st.Problems, tc.want)
			}
			kv, _ := b.JS.KeyValue(ctx, msg.BucketStatus)
			rep, err := msg.ReadStatus(ctx, kv)
			if err != nil || rep.Config == nil || rep.Config.OK || rep.Config.Candidate != liveconfig.Hash(tc.yaml) {
				t.Fatalf("status report config = %+v %v", rep.Config, err)
			}
		})
	}
	select {
	case c := <-configs:
		t.Fatalf("a rejected configuration was yielded: %v", c.Hash)
	case <-time.After(300 * time.Millisecond):
	}
}
