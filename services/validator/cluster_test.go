package validator_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/validator/kind"
)

// stalling is the real haproxy kind whose whole check of a bundle holding
// on never ends (until its replica stops): a replica that dies in the
// middle of the whole check of a provisionally accepted bundle.
type stalling struct {
	kind.HAProxyChecker
	on      string
	stalled *atomic.Int64
}

func (s stalling) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	for _, f := range b.Files {
		if f.Path == b.Main && strings.Contains(string(f.Content), s.on) {
			s.stalled.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}
	return s.HAProxyChecker.Check(ctx, b)
}

// TestFastPathOnACluster: on a 3-node NATS cluster, the replica that
// accepted a bundle provisionally dies, with its NATS node, before its
// whole check ends; a replica on another node finds the pending bundle in
// the status bucket and confirms it. With that node still down, a bundle
// the whole check refuses after its provisional acceptance is refuted
// (LastGood back to the last fully accepted bundle, checked whole from
// then on), and once the node is back the next render is checked whole
// and accepted.
func TestFastPathOnACluster(t *testing.T) {
	testkit.HAProxy(t)
	nc := testkit.NATSCluster(t)
	f := &fixture{t: t, bus: nc.Bus(t, 2)}
	nc.Provision(t, f.bus)
	cfg := mustParse(t, cfgYAML)

	var stalled atomic.Int64
	first := validator.WithCheckerWrap(validator.Options{}, func(c kind.Checker) kind.Checker {
		if h, ok := c.(kind.HAProxyChecker); ok {
			return stalling{HAProxyChecker: h, on: "127.0.0.1:8081", stalled: &stalled}
		}
		return c
	})
	env1 := testkit.NewEnv(t, nc.Bus(t, 0), "v1")
	f.env, f.envs = env1, []*testkit.Env{env1}
	stop1 := testkit.Run(t, func(ctx context.Context) error { return first.Run(ctx, env1.Env, cfg) })

	b1 := bundle(t, goodCfg, "a.example.com b\n")
	if v := f.submit(b1); !v.OK || v.Provisional {
		t.Fatalf("first bundle: ok=%v provisional=%v (%s); want a whole check's acceptance", v.OK, v.Provisional, v.Reason)
	}
	b2 := bundle(t, withServer("127.0.0.1:8081"), "a.example.com b\n")
	if v := f.submit(b2); !v.OK || !v.Provisional {
		t.Fatalf("runtime-only change: ok=%v provisional=%v (%s); want a provisional acceptance", v.OK, v.Provisional, v.Reason)
	}
	f.status("v2 pending its whole check", func(st msg.ValidationStatus) bool { return st.Pending == b2.Hash && st.LastFull == b1.Hash })
	testkit.Eventually(t, 30*time.Second, func() error {
		if stalled.Load() == 0 {
			return fmt.Errorf("the first replica has not started the whole check of v2")
		}
		return nil
	})
	if err := nc.Kill(0); err != nil {
		t.Fatal(err)
	}
	stop1()
	nc.WaitStreams(t, f.bus, msg.StreamValidated, msg.StreamRenders, "KV_"+msg.BucketStatus)

	var full atomic.Int64
	second := validator.WithPendingSweep(validator.WithCheckerWrap(validator.Options{}, func(c kind.Checker) kind.Checker {
		if h, ok := c.(kind.HAProxyChecker); ok {
			return disagreeing{HAProxyChecker: h, refuse: "10.66.66.66", full: &full}
		}
		return c
	}), time.Second)
	env2 := testkit.NewEnv(t, nc.Bus(t, 1), "v2")
	f.envs = append(f.envs, env2)
	testkit.Run(t, func(ctx context.Context) error { return second.Run(ctx, env2.Env, cfg) })
	st := f.status("v2 confirmed by the replica on another node", func(st msg.ValidationStatus) bool {
		return st.LastFull == b2.Hash && st.Pending == ""
	})
	// The whole check the first replica began and the second carried out
	// is no longer named: the deployer's pruning spares it no more.
	if st.LastGood != b2.Hash || st.FullOnly || st.Checking != "" || st.CheckingVersion != 0 {
		t.Fatalf("status after the confirmation = %+v", st)
	}
	// Counted once the status write has answered: a moment after the
	// status can be read.
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := testkit.LabeledValue(t, env2.Registry, "weft_validator_fast_total", map[string]string{"target": "edge", "outcome": "confirmed"}); n != 1 {
			return fmt.Errorf("confirmations counted by the second replica = %v, want 1", n)
		}
		return nil
	})

	b3 := bundle(t, withServer("10.66.66.66:8080"), "a.example.com b\n")
	f.store(b3)
	f.publish(b3)
	refuted := f.lastVerdict("a refutation of v3", func(v msg.Validated) bool { return v.Version == 3 && v.Refutes })
	if v := f.earlierVerdict(3); !v.OK || !v.Provisional {
		t.Fatalf("the value the whole check refuses: ok=%v provisional=%v (%s); want a provisional acceptance first", v.OK, v.Provisional, v.Reason)
	}
	if refuted.OK || refuted.BundleHash != b3.Hash {
		t.Fatalf("refutation = %+v", refuted)
	}
	st = f.status("rolled back to v2", func(st msg.ValidationStatus) bool { return st.LastGood == b2.Hash })
	if !st.FullOnly || st.Pending != "" || st.LastFull != b2.Hash || st.Checking != "" {
		t.Fatalf("status after the refutation = %+v", st)
	}

	if err := nc.Restart(0); err != nil {
		t.Fatal(err)
	}
	nc.WaitStreams(t, f.bus, msg.StreamValidated, msg.StreamRenders, "KV_"+msg.BucketStatus)
	before := full.Load()
	b4 := bundle(t, withServer("127.0.0.1:8082"), "a.example.com b\n")
	if v := f.submit(b4); !v.OK || v.Provisional {
		t.Fatalf("after a refutation: ok=%v provisional=%v (%s); want a whole check's acceptance", v.OK, v.Provisional, v.Reason)
	}
	if full.Load() == before {
		t.Fatal("after a refutation the next render was not checked whole")
	}
}
