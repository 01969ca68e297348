package validator_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
)

// BenchmarkScatterGather validates a bundle of 200 backends through the
// whole scatter-gather (request over NATS, each kind reads the bundle from
// the object store, checks it and answers) and reports x-bare: its time
// per validation over a bare `haproxy -c` on the same bundle already on
// disk, measured in the same run.
func BenchmarkScatterGather(b *testing.B) {
	for _, kinds := range [][]string{{"haproxy"}, {"haproxy", "policy", "syntax", "template"}} {
		b.Run(fmtKinds(kinds), func(b *testing.B) { benchGather(b, kinds) })
	}
}

func fmtKinds(kinds []string) string {
	if len(kinds) == 1 {
		return "kinds=" + kinds[0]
	}
	return "kinds=all"
}

func benchGather(b *testing.B, kinds []string) {
	bin := testkit.HAProxy(b)
	bus := testkit.NATS(b)
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		b.Fatal(err)
	}
	env := testkit.NewEnv(b, bus, "v1")
	env.Env.Log = telemetry.NewLogger(io.Discard, slog.LevelError)
	testkit.Run(b, func(ctx context.Context) error { return validator.Run(ctx, env.Env, cfg) })
	bnd, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", testkit.HAProxyBundle(200))
	if err != nil {
		b.Fatal(err)
	}
	if err := msg.NewBundleStore(bus.JS).PutBundle(context.Background(), "", bnd); err != nil {
		b.Fatal(err)
	}
	bare := bareCheck(b, bin, bnd)
	validate := func() {
		res, err := gather.Validate(context.Background(), bus.NC, msg.ValidateSubject("edge"),
			msg.ValidateRequest{Target: "edge", Version: 1, BundleHash: bnd.Hash}, kinds, 30*time.Second)
		if err != nil || !res.OK() {
			b.Fatalf("validation: %v %+v", err, res)
		}
	}
	validate()
	start := time.Now()
	n := 0
	for b.Loop() {
		validate()
		n++
	}
	per := time.Since(start) / time.Duration(n)
	b.ReportMetric(float64(per)/float64(bare), "x-bare")
	b.ReportMetric(float64(bare.Microseconds())/1000, "bare-ms")
}

// bareCheck lays bnd out at its base rewritten to a temp dir and returns
// the median time of five `haproxy -c` runs on it.
func bareCheck(b *testing.B, bin string, bnd msg.Bundle) time.Duration {
	dir := b.TempDir()
	moved, err := bnd.Relocate(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range moved.Files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var times []time.Duration
	for range 5 {
		start := time.Now()
		if out, err := exec.Command(bin, "-c", "-f", filepath.Join(dir, "haproxy.cfg")).CombinedOutput(); err != nil {
			b.Fatalf("haproxy -c: %v\n%s", err, out)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return times[len(times)/2]
}
