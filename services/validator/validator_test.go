package validator_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

const cfgYAML = `
targets:
  edge:
    base: /etc/haproxy
    validate: {kinds: [haproxy, template], timeout: 5s}
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "unused"}
`

const goodCfg = `global
  maxconn 100
defaults
  mode http
  timeout connect 1s
  timeout client 1s
  timeout server 1s
frontend f
  bind 127.0.0.1:18081
  use_backend %[req.hdr(host),map(/etc/haproxy/maps/host.map)]
  default_backend b
backend b
  server s1 127.0.0.1:8080
`

func bundle(t *testing.T, cfg, hostMap string) msg.Bundle {
	t.Helper()
	b, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(cfg)},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte(hostMap)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fixture struct {
	t    *testing.T
	bus  *testkit.Bus
	env  *testkit.Env   // the first replica's
	envs []*testkit.Env // every replica's
	ver  uint64
}

// sum adds up a labeled metric over every replica.
func (f *fixture) sum(name string, labels map[string]string) float64 {
	n := 0.0
	for _, env := range f.envs {
		n += testkit.LabeledValue(f.t, env.Registry, name, labels)
	}
	return n
}

func start(t *testing.T) *fixture {
	f, _ := startWith(t, cfgYAML, validator.Options{})
	return f
}

// startWith runs one validator replica per Options (v1, v2, ...) on the
// configuration yaml and returns their stop functions.
func startWith(t *testing.T, yaml string, replicas ...validator.Options) (*fixture, []func()) {
	cfg, err := config.Parse([]byte(yaml), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	var stops []func()
	for i, o := range replicas {
		env := testkit.NewEnv(t, f.bus, fmt.Sprintf("v%d", i+1))
		if i == 0 {
			f.env = env
		}
		f.envs = append(f.envs, env)
		stops = append(stops, testkit.Run(t, func(ctx context.Context) error { return o.Run(ctx, env.Env, cfg) }))
	}
	return f, stops
}

// submit stores b and publishes a render message for it, returning the verdict.
func (f *fixture) submit(b msg.Bundle) msg.Validated {
	f.t.Helper()
	f.store(b)
	return f.verdict(f.publish(b))
}

// store puts b in the object store.
func (f *fixture) store(b msg.Bundle) {
	f.t.Helper()
	ctx := context.Background()
	if err := msg.NewBundleStore(f.bus.JS).PutBundle(ctx, "", b); err != nil {
		f.t.Fatal(err)
	}
}

// publish publishes the next version's render message naming b and, as
// the renderer does, the render status after it.
func (f *fixture) publish(b msg.Bundle) uint64 {
	f.t.Helper()
	ctx := context.Background()
	f.ver++
	r := msg.Render{Target: "edge", Version: f.ver, BundleHash: b.Hash, At: time.Now()}
	out, _ := msg.NewMsg(msg.RenderSubject("edge"), "", r)
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		f.t.Fatal(err)
	}
	f.renderStatus(func(rs *msg.RenderStatus) { rs.Target, rs.Version, rs.BundleHash = "edge", f.ver, b.Hash })
	return f.ver
}

// renderStatus changes edge's render status with change.
func (f *fixture) renderStatus(change func(*msg.RenderStatus)) {
	f.t.Helper()
	ctx := context.Background()
	status, err := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		f.t.Fatal(err)
	}
	var rs msg.RenderStatus
	rev, err := msg.LoadStatus(ctx, status, msg.RenderStatusKey("edge"), &rs)
	if err != nil {
		f.t.Fatal(err)
	}
	change(&rs)
	if _, err := msg.StoreStatus(ctx, status, msg.RenderStatusKey("edge"), rs, rev); err != nil {
		f.t.Fatal(err)
	}
}

// verdict waits for the verdict on version ver.
func (f *fixture) verdict(ver uint64) msg.Validated {
	f.t.Helper()
	ctx := context.Background()
	var v msg.Validated
	testkit.Eventually(f.t, 20*time.Second, func() error {
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
		if v.Version != ver {
			return fmt.Errorf("verdict for v%d", v.Version)
		}
		return nil
	})
	return v
}

func TestVerdicts(t *testing.T) {
	f := start(t)
	cases := []struct {
		name     string
		b        msg.Bundle
		ok       bool
		cached   bool
		problems []string // "file:line:substring"
	}{
		{name: "valid bundle", b: bundle(t, goodCfg, "a.example.com b\n"), ok: true},
		{name: "same bundle again is cached", b: bundle(t, goodCfg, "a.example.com b\n"), ok: true, cached: true},
		{name: "unknown keyword", b: bundle(t, strings.Replace(goodCfg, "maxconn 100", "maxconn 100\n  frobnicate yes", 1), "a b\n"),
			problems: []string{"haproxy.cfg:3:frobnicate"}},
		{name: "map line without value", b: bundle(t, goodCfg, "lonely-key\n"), problems: []string{"maps/host.map:1:no value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := f.submit(tc.b)
			if v.OK != tc.ok || v.Cached != tc.cached {
				t.Fatalf("verdict ok=%v cached=%v (%s), want ok=%v cached=%v", v.OK, v.Cached, v.Reason, tc.ok, tc.cached)
			}
			if len(v.Replies) != 2 {
				t.Fatalf("replies = %+v, want one per kind", v.Replies)
			}
			for _, want := range tc.problems {
				parts := strings.SplitN(want, ":", 3)
				found := false
				for _, r := range v.Replies {
					for _, p := range r.Problems {
						if p.File == parts[0] && fmt.Sprint(p.Line) == parts[1] && strings.Contains(p.Message, parts[2]) {
							found = true
						}
					}
				}
				if !found {
					t.Errorf("no problem %s in %+v", want, v.Replies)
				}
			}
		})
	}
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	e, err := kv.Get(context.Background(), msg.ValidationStatusKey("edge"))
	if err != nil {
		t.Fatal(err)
	}
	var st msg.ValidationStatus
	if err := msg.Decode(e.Value(), &st); err != nil || st.OK || st.LastGoodVersion != 2 || st.Version != 4 {
		t.Fatalf("validation status = %+v %v", st, err)
	}
}

func TestGatherNamesMissingKinds(t *testing.T) {
	f := start(t)
	b := bundle(t, goodCfg, "a b\n")
	f.submit(b) // stores the bundle
	res, err := gather.Validate(context.Background(), f.bus.NC, msg.ValidateSubject("edge"),
		msg.ValidateRequest{Target: "edge", Version: 1, BundleHash: b.Hash}, []string{"telepathy", "template"}, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || strings.Join(res.Missing, ",") != "telepathy" || len(res.Replies) != 1 || res.Replies[0].Kind != "template" {
		t.Fatalf("result = %+v", res)
	}
}

// TestForgedRenderIsDeadLettered: a render message nobody rendered (any
// client can publish on weft.render.<target>) with a version far ahead
// orders nothing: it is dead-lettered once the renderer's status has not
// confirmed it in time, and the real renders are validated and recorded.
// A validation status such a message wrote before is replaced.
func TestForgedRenderIsDeadLettered(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	status, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	if _, err := msg.StoreStatus(ctx, status, msg.ValidationStatusKey("edge"),
		msg.ValidationStatus{Target: "edge", Version: 99998, BundleHash: "forged", Reason: "refused"}, 0); err != nil {
		t.Fatal(err)
	}
	good := bundle(t, goodCfg, "a b\n")
	forged := msg.Render{Target: "edge", Version: 99999, BundleHash: good.Hash, At: time.Now()}
	out, _ := msg.NewMsg(msg.RenderSubject("edge"), "", forged)
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		t.Fatal(err)
	}
	if v := f.submit(good); !v.OK {
		t.Fatalf("real render refused: %s", v.Reason)
	}
	var st msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, status, msg.ValidationStatusKey("edge"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Version != 1 || !st.OK || st.LastGoodVersion != 1 || st.LastGood != good.Hash {
		t.Fatalf("validation status = %+v, want v1 accepted", st)
	}
	dlq, _ := f.bus.JS.Stream(ctx, msg.StreamDLQ)
	var dl msg.DeadLetter
	testkit.Eventually(t, 3*msg.ConfirmWait, func() error {
		m, err := dlq.GetLastMsgForSubject(ctx, msg.DLQSubject("validator"))
		if err != nil {
			return err
		}
		return msg.Decode(m.Data, &dl)
	})
	if dl.Subject != msg.RenderSubject("edge") || !strings.Contains(dl.Reason, "v99999") || !strings.Contains(dl.Reason, msg.ErrUnconfirmed.Error()) {
		t.Fatalf("dead letter = %+v", dl)
	}
	if n := testkit.CounterValue(t, f.env.Registry, "weft_validator_dead_letters_total"); n != 1 {
		t.Fatalf("dead letters metric = %v, want 1", n)
	}
	if !strings.Contains(f.env.Logs.String(), "message dead-lettered") {
		t.Fatal("no log of the dead letter")
	}
	// Another real render still goes through.
	if v := f.submit(bundle(t, goodCfg, "c d\n")); !v.OK || v.Version != 2 {
		t.Fatalf("next render: %+v", v)
	}
}

// TestMissingChunkIsUndecided: a bundle whose description is stored but a
// chunk of which is missing (dropped by the store's limits) is no answer:
// the kinds are undecided, no verdict is published, and once the bundle is
// stored again it is accepted.
func TestMissingChunkIsUndecided(t *testing.T) {
	f := start(t)
	b := bundle(t, goodCfg, "chunk.example.com b\n")
	f.store(b)
	ctx := context.Background()
	stream, err := f.bus.JS.Stream(ctx, msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	content := b.Files[0].Content
	sum := sha256.Sum256(content[:msg.ChunkEnds(content)[0]])
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(msg.ChunkSubject(hex.EncodeToString(sum[:])))); err != nil {
		t.Fatal(err)
	}
	ver := f.publish(b)
	status, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	testkit.Eventually(t, 30*time.Second, func() error {
		var st msg.ValidationStatus
		if _, err := msg.LoadStatus(ctx, status, msg.ValidationStatusKey("edge"), &st); err != nil {
			return err
		}
		if !st.Undecided || st.OK || st.Version != ver || !strings.Contains(st.Reason, msg.ErrChunkMissing.Error()) {
			return fmt.Errorf("status = %+v, want undecided naming the missing chunk", st)
		}
		return nil
	})
	validated, _ := f.bus.JS.Stream(ctx, msg.StreamValidated)
	if m, err := validated.GetLastMsgForSubject(ctx, msg.ValidatedSubject("edge")); err == nil {
		t.Fatalf("a verdict was published for a bundle missing a chunk: %s", m.Data)
	}
	f.store(b)
	if v := f.verdict(ver); !v.OK {
		t.Fatalf("verdict once whole: ok=%v (%s)", v.OK, v.Reason)
	}
}

// TestBundleNotYetReadableIsAskedAgain: a render whose bundle the kinds
// cannot read yet (a store node behind, a read that timed out) gets no
// verdict, never a refusal; the kinds are asked again, the status says
// what the target waits for, and once the bundle can be read it is
// accepted.
func TestBundleNotYetReadableIsAskedAgain(t *testing.T) {
	f := start(t)
	b := bundle(t, goodCfg, "late.example.com b\n")
	ver := f.publish(b)
	undecided := map[string]string{"target": "edge", "verdict": "undecided"}
	testkit.Eventually(t, 30*time.Second, func() error {
		if n := testkit.LabeledValue(t, f.env.Registry, "weft_validator_verdicts_total", undecided); n < 3 {
			return fmt.Errorf("%v undecided gathers", n)
		}
		return nil
	})
	ctx := context.Background()
	stream, _ := f.bus.JS.Stream(ctx, msg.StreamValidated)
	if m, err := stream.GetLastMsgForSubject(ctx, msg.ValidatedSubject("edge")); err == nil {
		t.Fatalf("a verdict was published for an unreadable bundle: %s", m.Data)
	}
	status, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	var st msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, status, msg.ValidationStatusKey("edge"), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Undecided || st.OK || st.Version != ver || !strings.Contains(st.Reason, msg.ErrNotStored.Error()) {
		t.Fatalf("status = %+v, want undecided on v%d naming the unreadable bundle", st, ver)
	}
	f.store(b)
	if v := f.verdict(ver); !v.OK {
		t.Fatalf("verdict once readable: ok=%v (%s)", v.OK, v.Reason)
	}
	var after msg.ValidationStatus
	if _, err := msg.LoadStatus(ctx, status, msg.ValidationStatusKey("edge"), &after); err != nil || after.Undecided || !after.OK {
		t.Fatalf("status after the verdict = %+v (%v)", after, err)
	}
}

// TestDryRunBundleIsReadUnderItsOwnName: a dry run's bundle sits in the
// object store under its dry-run name, not its hash; every kind reads it
// from there and answers, and nothing of the answers is kept: no verdict
// cached, no verdict published, no validation status.
func TestDryRunBundleIsReadUnderItsOwnName(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	bad := bundle(t, strings.Replace(goodCfg, "maxconn 100", "maxconn 100\n  frobnicate yes", 1), "a b\n")
	name := msg.DryRunObjectName("uid-1-edge")
	if err := msg.NewBundleStore(f.bus.JS).PutBundle(ctx, name, bad); err != nil {
		t.Fatal(err)
	}
	res, err := gather.Validate(ctx, f.bus.NC, msg.ValidateSubject("edge"),
		msg.ValidateRequest{Target: "edge", BundleHash: bad.Hash, DryRunObject: name}, []string{"haproxy", "template"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Replies) != 2 || len(res.Undecided()) != 0 || res.OK() {
		t.Fatalf("result = %+v, want both kinds deciding, haproxy refusing", res)
	}
	found := false
	for _, r := range res.Replies {
		for _, p := range r.Problems {
			found = found || (r.Kind == "haproxy" && p.File == "haproxy.cfg" && p.Line == 3 && strings.Contains(p.Message, "frobnicate"))
		}
	}
	if !found {
		t.Fatalf("no haproxy.cfg:3 problem in %+v", res.Replies)
	}
	if _, err := msg.NewBundleStore(f.bus.JS).StoredAt(ctx, bad.Hash); !errors.Is(err, msg.ErrNotStored) {
		t.Fatal("the dry run's bundle is in the store under its hash")
	}
	verdicts, _ := f.bus.JS.KeyValue(ctx, msg.BucketVerdicts)
	if keys, err := verdicts.ListKeys(ctx); err == nil {
		for k := range keys.Keys() {
			t.Errorf("verdict cached for a dry run: %s", k)
		}
	}
	status, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	if _, err := status.Get(ctx, msg.ValidationStatusKey("edge")); err == nil {
		t.Error("a dry run wrote the validation status")
	}
	stream, _ := f.bus.JS.Stream(ctx, msg.StreamValidated)
	if _, err := stream.GetLastMsgForSubject(ctx, msg.ValidatedSubject("edge")); err == nil {
		t.Error("a verdict was published for a dry run")
	}
}
