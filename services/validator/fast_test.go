package validator_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/validator/haproxycheck"
	"github.com/weftio/weft/services/validator/kind"
)

// disagreeing is the real haproxy kind whose whole check also refuses
// any bundle whose main file holds refuse, a value its fast path proves
// valid: the disagreement a refutation handles.
type disagreeing struct {
	kind.HAProxyChecker
	refuse string
	full   *atomic.Int64 // whole checks run
	behind *atomic.Int64 // of them, marked to run behind the rest
}

func (d disagreeing) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	d.full.Add(1)
	if d.behind != nil && haproxycheck.IsBehind(ctx) {
		d.behind.Add(1)
	}
	for _, f := range b.Files {
		if f.Path == b.Main && strings.Contains(string(f.Content), d.refuse) {
			return []msg.Problem{{File: f.Path, Severity: "error", Message: "refused: " + d.refuse}}, nil
		}
	}
	return d.HAProxyChecker.Check(ctx, b)
}

func withServer(addr string) string {
	return strings.Replace(goodCfg, "server s1 127.0.0.1:8080", "server s1 "+addr, 1)
}

// lastVerdict waits until the last verdict on edge satisfies ok.
func (f *fixture) lastVerdict(what string, ok func(msg.Validated) bool) msg.Validated {
	f.t.Helper()
	ctx := context.Background()
	var v msg.Validated
	testkit.Eventually(f.t, 30*time.Second, func() error {
		stream, err := f.bus.JS.Stream(ctx, msg.StreamValidated)
		if err != nil {
			return err
		}
		m, err := stream.GetLastMsgForSubject(ctx, msg.ValidatedSubject("edge"))
		if err != nil {
			return err
		}
		v = msg.Validated{}
		if err := msg.Decode(m.Data, &v); err != nil {
			return err
		}
		if !ok(v) {
			return fmt.Errorf("last verdict %+v is not %s", v, what)
		}
		return nil
	})
	return v
}

// earlierVerdict is the verdict on version ver published before the last
// verdict on edge (which refutes it).
func (f *fixture) earlierVerdict(ver uint64) msg.Validated {
	f.t.Helper()
	ctx := context.Background()
	stream, err := f.bus.JS.Stream(ctx, msg.StreamValidated)
	if err != nil {
		f.t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, msg.ValidatedSubject("edge"))
	if err != nil {
		f.t.Fatal(err)
	}
	for seq := last.Sequence - 1; seq > 0; seq-- {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil || m.Subject != msg.ValidatedSubject("edge") {
			continue
		}
		var v msg.Validated
		if msg.Decode(m.Data, &v) == nil && v.Version == ver && !v.Refutes {
			return v
		}
	}
	f.t.Fatalf("no verdict on v%d before the last", ver)
	return msg.Validated{}
}

// status waits until the validation status of edge satisfies ok.
func (f *fixture) status(what string, ok func(msg.ValidationStatus) bool) msg.ValidationStatus {
	f.t.Helper()
	ctx := context.Background()
	var st msg.ValidationStatus
	testkit.Eventually(f.t, 30*time.Second, func() error {
		kv, err := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
		if err != nil {
			return err
		}
		st = msg.ValidationStatus{}
		if _, err := msg.LoadStatus(ctx, kv, msg.ValidationStatusKey("edge"), &st); err != nil {
			return err
		}
		if !ok(st) {
			return fmt.Errorf("validation status %+v is not %s", st, what)
		}
		return nil
	})
	return st
}

// TestFastPath: a bundle that changed only in a server's address is
// accepted provisionally, then confirmed by the whole check (LastFull
// moves to it); one the whole check refuses after its provisional
// acceptance is refuted (LastGood back to the last fully accepted bundle,
// a verdict with Refutes, the metric), and the next render is checked
// whole; once one is fully accepted, the fast path is taken again.
func TestFastPath(t *testing.T) {
	testkit.HAProxy(t)
	var full, behind atomic.Int64
	wrap := func(c kind.Checker) kind.Checker {
		if h, ok := c.(kind.HAProxyChecker); ok {
			return disagreeing{HAProxyChecker: h, refuse: "10.66.66.66", full: &full, behind: &behind}
		}
		return c
	}
	f, _ := startWith(t, cfgYAML, validator.WithCheckerWrap(validator.Options{}, wrap))
	labels := func(outcome string) map[string]string { return map[string]string{"target": "edge", "outcome": outcome} }

	b1 := bundle(t, goodCfg, "a.example.com b\n")
	if v := f.submit(b1); !v.OK || v.Provisional {
		t.Fatalf("first bundle: ok=%v provisional=%v (%s); want a whole check's acceptance", v.OK, v.Provisional, v.Reason)
	}
	if n := behind.Load(); n != 0 {
		t.Fatalf("the first bundle's check, which its deploy waits for, was run behind (%d)", n)
	}
	f.status("with v1 as the last fully accepted bundle", func(st msg.ValidationStatus) bool { return st.LastFull == b1.Hash })

	b2 := bundle(t, withServer("127.0.0.1:8081 weight 10"), "a.example.com b\nc.example.com b\n")
	if v := f.submit(b2); !v.OK || !v.Provisional {
		t.Fatalf("runtime-only change: ok=%v provisional=%v (%s); want a provisional acceptance", v.OK, v.Provisional, v.Reason)
	}
	st := f.status("confirmed (LastFull v2)", func(st msg.ValidationStatus) bool { return st.LastFull == b2.Hash && st.Pending == "" })
	if st.LastFullVersion != 2 || st.LastGood != b2.Hash || st.FullOnly {
		t.Fatalf("status after the confirmation = %+v", st)
	}
	if n := behind.Load(); n != 1 {
		t.Fatalf("%d whole checks ran behind the rest; want 1, the confirmation of v2 (deployed already)", n)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := f.sum("weft_validator_fast_total", labels("confirmed")); n != 1 {
			return fmt.Errorf("confirmed = %v", n)
		}
		return nil
	})

	b3 := bundle(t, withServer("10.66.66.66:8080 weight 10"), "a.example.com b\nc.example.com b\n")
	f.store(b3)
	f.publish(b3)
	refuted := f.lastVerdict("a refutation of v3", func(v msg.Validated) bool { return v.Version == 3 && v.Refutes })
	if v := f.earlierVerdict(3); !v.OK || !v.Provisional {
		t.Fatalf("the value the whole check refuses: ok=%v provisional=%v (%s); want a provisional acceptance first", v.OK, v.Provisional, v.Reason)
	}
	if refuted.OK || refuted.BundleHash != b3.Hash || !strings.Contains(refuted.Reason, "10.66.66.66") {
		t.Fatalf("refutation = %+v", refuted)
	}
	st = f.status("rolled back to v2", func(st msg.ValidationStatus) bool { return st.LastGood == b2.Hash })
	if st.LastGoodVersion != 2 || !st.FullOnly || st.OK || st.Pending != "" || st.LastFull != b2.Hash {
		t.Fatalf("status after the refutation = %+v", st)
	}
	if n := f.sum("weft_validator_fast_refuted_total", map[string]string{"target": "edge"}); n != 1 {
		t.Fatalf("weft_validator_fast_refuted_total = %v, want 1", n)
	}
	if v := f.submit(b3); v.OK {
		t.Fatalf("the refuted bundle again: accepted (%+v)", v)
	}

	before := full.Load()
	b4 := bundle(t, withServer("127.0.0.1:8082 weight 10"), "a.example.com b\nc.example.com b\n")
	if v := f.submit(b4); !v.OK || v.Provisional {
		t.Fatalf("after a refutation: ok=%v provisional=%v (%s); want a whole check's acceptance", v.OK, v.Provisional, v.Reason)
	}
	if full.Load() == before {
		t.Fatal("after a refutation the next render was not checked whole")
	}
	st = f.status("v4 fully accepted", func(st msg.ValidationStatus) bool { return st.LastFull == b4.Hash })
	if st.FullOnly {
		t.Fatalf("FullOnly still set after a whole check's acceptance: %+v", st)
	}

	b5 := bundle(t, withServer("127.0.0.1:8083 weight 10"), "a.example.com b\nc.example.com b\n")
	if v := f.submit(b5); !v.OK || !v.Provisional {
		t.Fatalf("after a full acceptance: ok=%v provisional=%v; want the fast path again", v.OK, v.Provisional)
	}
	f.status("v5 confirmed", func(st msg.ValidationStatus) bool { return st.LastFull == b5.Hash })
}

// gated is the real haproxy kind whose whole checks run behind the rest
// (the confirmations of provisionally accepted bundles) each wait for a
// value on release, once they have sent their bundle's hash on entered.
type gated struct {
	kind.HAProxyChecker
	entered chan string
	release chan struct{}
}

func (g gated) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	if haproxycheck.IsBehind(ctx) {
		g.entered <- b.Hash
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.HAProxyChecker.Check(ctx, b)
}

// TestConfirmationOfAnOlderPendingBundleMovesTheBase: when renders come
// faster than whole checks, the bundle a whole check accepted becomes the
// fast path's base (LastFull) even though a newer bundle is pending by
// then; the newer one stays pending and is confirmed next.
func TestConfirmationOfAnOlderPendingBundleMovesTheBase(t *testing.T) {
	testkit.HAProxy(t)
	entered, release := make(chan string, 4), make(chan struct{})
	wrap := func(c kind.Checker) kind.Checker {
		if h, ok := c.(kind.HAProxyChecker); ok {
			return gated{HAProxyChecker: h, entered: entered, release: release}
		}
		return c
	}
	f, _ := startWith(t, cfgYAML, validator.WithCheckerWrap(validator.Options{}, wrap))
	b1 := bundle(t, goodCfg, "a.example.com b\n")
	if v := f.submit(b1); !v.OK || v.Provisional {
		t.Fatalf("first bundle: ok=%v provisional=%v (%s); want a whole check's acceptance", v.OK, v.Provisional, v.Reason)
	}
	b2 := bundle(t, withServer("127.0.0.1:8081"), "a.example.com b\n")
	b3 := bundle(t, withServer("127.0.0.1:8082"), "a.example.com b\n")
	for i, b := range []msg.Bundle{b2, b3} {
		if v := f.submit(b); !v.OK || !v.Provisional {
			t.Fatalf("runtime-only change: ok=%v provisional=%v (%s); want a provisional acceptance", v.OK, v.Provisional, v.Reason)
		}
		if i == 0 {
			if h := <-entered; h != b2.Hash {
				t.Fatalf("the first whole check behind the rest is of %s, want v2's", h)
			}
		}
	}
	// While v2 is checked whole, the status names it (so that its bundle
	// is kept, v3 pending or not).
	f.status("v2 checked, v3 pending", func(st msg.ValidationStatus) bool {
		return st.Checking == b2.Hash && st.CheckingVersion == 2 && st.Pending == b3.Hash
	})
	// v2's whole check, started before v3 was pending, finishes now.
	release <- struct{}{}
	st := f.status("v2 the base, v3 pending", func(st msg.ValidationStatus) bool { return st.LastFull == b2.Hash })
	if st.LastFullVersion != 2 || st.Pending != b3.Hash || st.PendingVersion != 3 || st.LastGood != b3.Hash || st.FullOnly {
		t.Fatalf("status after v2's whole check = %+v", st)
	}
	if h := <-entered; h != b3.Hash {
		t.Fatalf("the second whole check behind the rest is of %s, want v3's", h)
	}
	release <- struct{}{}
	f.status("v3 confirmed", func(st msg.ValidationStatus) bool {
		return st.LastFull == b3.Hash && st.LastFullVersion == 3 && st.Pending == "" && st.Checking == ""
	})
}

// TestWholeChecksSpacedByTheGap: under a stream of runtime-only changes,
// the whole check of the newest pending bundle starts validate.confirm_gap
// after the previous whole check ended, not at once; the bundles
// meanwhile are accepted provisionally without waiting for it.
func TestWholeChecksSpacedByTheGap(t *testing.T) {
	testkit.HAProxy(t)
	const gap = 1500 * time.Millisecond
	entered, release := make(chan string, 4), make(chan struct{}, 4)
	wrap := func(c kind.Checker) kind.Checker {
		if h, ok := c.(kind.HAProxyChecker); ok {
			return gated{HAProxyChecker: h, entered: entered, release: release}
		}
		return c
	}
	f, _ := startWith(t, strings.Replace(cfgYAML, "timeout: 5s}", "timeout: 5s, confirm_gap: 1500ms}", 1), validator.WithCheckerWrap(validator.Options{}, wrap))
	f.submit(bundle(t, goodCfg, "a.example.com b\n"))
	b2 := bundle(t, withServer("127.0.0.1:8081"), "a.example.com b\n")
	if v := f.submit(b2); !v.OK || !v.Provisional {
		t.Fatalf("v2: ok=%v provisional=%v (%s); want a provisional acceptance", v.OK, v.Provisional, v.Reason)
	}
	if h := <-entered; h != b2.Hash {
		t.Fatalf("first whole check behind the rest is of %s, want v2's at once", h)
	}
	released := time.Now() // v2's whole check ends after this
	release <- struct{}{}
	f.status("v2 confirmed", func(st msg.ValidationStatus) bool { return st.LastFull == b2.Hash && st.Pending == "" })
	b3 := bundle(t, withServer("127.0.0.1:8082"), "a.example.com b\n")
	b4 := bundle(t, withServer("127.0.0.1:8083"), "a.example.com b\n")
	for _, b := range []msg.Bundle{b3, b4} {
		if v := f.submit(b); !v.OK || !v.Provisional {
			t.Fatalf("ok=%v provisional=%v (%s); want a provisional acceptance", v.OK, v.Provisional, v.Reason)
		}
	}
	h := <-entered
	if waited := time.Since(released); waited < gap {
		t.Fatalf("the next whole check started %v after the last one was released, want at least the gap %v", waited, gap)
	}
	if h != b4.Hash {
		t.Fatalf("the next whole check is of %s, want the newest pending (v4)", h)
	}
	release <- struct{}{}
	f.status("v4 confirmed", func(st msg.ValidationStatus) bool { return st.LastFull == b4.Hash && st.Pending == "" })
}

// TestFastPathOff: validate.fast: false checks every bundle whole.
func TestFastPathOff(t *testing.T) {
	testkit.HAProxy(t)
	f, _ := startWith(t, strings.Replace(cfgYAML, "timeout: 5s}", "timeout: 5s, fast: false}", 1), validator.Options{})
	f.submit(bundle(t, goodCfg, "a.example.com b\n"))
	if v := f.submit(bundle(t, withServer("127.0.0.1:8081"), "a.example.com b\n")); !v.OK || v.Provisional {
		t.Fatalf("validate.fast false: ok=%v provisional=%v; want a whole check's acceptance", v.OK, v.Provisional)
	}
}

// TestFastPendingConfirmedByAnyReplica: the whole check due on a
// provisionally accepted bundle is recorded in the status bucket, so a
// replica that did not accept it (here: one started after the status was
// last written a minute ago) confirms it.
func TestFastPendingConfirmedByAnyReplica(t *testing.T) {
	testkit.HAProxy(t)
	f, _ := startWith(t, cfgYAML)
	b1 := bundle(t, goodCfg, "a.example.com b\n")
	b2 := bundle(t, withServer("127.0.0.1:8081"), "a.example.com b\n")
	f.store(b1)
	f.store(b2)
	ctx := context.Background()
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	st := msg.ValidationStatus{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true,
		LastGood: b2.Hash, LastGoodVersion: 2, LastFull: b1.Hash, LastFullVersion: 1, Pending: b2.Hash, PendingVersion: 2, At: time.Now().Add(-time.Minute)}
	if _, err := msg.StoreStatus(ctx, kv, msg.ValidationStatusKey("edge"), st, 0); err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, cfgYAML)
	env := testkit.NewEnv(t, f.bus, "late")
	testkit.Run(t, func(ctx context.Context) error { return validator.Run(ctx, env.Env, cfg) })
	f.status("v2 confirmed by the late replica", func(st msg.ValidationStatus) bool {
		return st.LastFull == b2.Hash && st.LastFullVersion == 2 && st.Pending == ""
	})
}

func mustParse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "/")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
