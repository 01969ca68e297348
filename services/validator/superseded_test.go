package validator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
)

// TestSupersededRendersAreNotValidated publishes five renders, each of
// another bundle, before the validator runs: only the newest is
// validated, the four it superseded are counted. Then a render whose
// successor failed (the renderer's status still names its bundle as the
// last good one) is validated.
func TestSupersededRendersAreNotValidated(t *testing.T) {
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	var last msg.Bundle
	for i := range 5 {
		last = bundle(t, goodCfg+fmt.Sprintf("# render %d\n", i), "a b\n")
		f.store(last)
		f.publish(last)
	}
	f.env = testkit.NewEnv(t, f.bus, "v1")
	f.envs = []*testkit.Env{f.env}
	opts := validator.Options{}
	testkit.Run(t, func(ctx context.Context) error { return opts.Run(ctx, f.env.Env, cfg) })
	if v := f.verdict(5); !v.OK || v.BundleHash != last.Hash {
		t.Fatalf("verdict on the newest render = %+v", v)
	}
	if n := verdictCount(t, f); n != 1 {
		t.Errorf("%d verdicts published, want 1 (the newest render's)", n)
	}
	if n := f.sum("weft_validator_renders_superseded_total", map[string]string{"target": "edge"}); n != 4 {
		t.Errorf("%v renders counted superseded, want 4", n)
	}

	// v6 renders a new bundle; v7 fails, so the status stays on v6's
	// bundle: v6 is the last good render and is validated.
	good := bundle(t, goodCfg+"# render 6\n", "a b\n")
	f.store(good)
	f.publish(good)
	f.publishFailure()
	if v := f.verdict(6); !v.OK || v.BundleHash != good.Hash {
		t.Fatalf("verdict on the render before a failed one = %+v", v)
	}
}

// publishFailure publishes the next version as a failed render and, as the
// renderer does, moves its status to that version with the last good
// bundle kept and the error set.
func (f *fixture) publishFailure() {
	f.t.Helper()
	ctx := context.Background()
	f.ver++
	r := msg.Render{Target: "edge", Version: f.ver, Failure: &msg.TemplateError{Template: "haproxy.cfg", Message: "boom"}, At: time.Now()}
	out, _ := msg.NewMsg(msg.RenderSubject("edge"), "", r)
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		f.t.Fatal(err)
	}
	f.renderStatus(func(rs *msg.RenderStatus) { rs.Version, rs.LastError, rs.LastErrorAt = f.ver, "boom", time.Now() })
}

// verdictCount is the number of verdicts on edge in the stream.
func verdictCount(t *testing.T, f *fixture) uint64 {
	t.Helper()
	ctx := context.Background()
	stream, err := f.bus.JS.Stream(ctx, msg.StreamValidated)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(msg.ValidatedSubject("edge")))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[msg.ValidatedSubject("edge")]
}
