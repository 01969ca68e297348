//go:build linux

package runtime

import "testing"

// BenchmarkApplyServerAddress measures one Apply that moves a server slot to
// another address, on a real HAProxy, delivered through the Runtime API
// ("runtime") and by a reload of the same bundle ("reload", with
// DisableRuntime). Both include writing haproxy.cfg atomically and reading
// the reload counter; the reload also waits for the new worker to answer.
func BenchmarkApplyServerAddress(b *testing.B) {
	for _, mode := range []struct {
		name   string
		reload bool
	}{{"runtime", false}, {"reload", true}} {
		b.Run(mode.name, func(b *testing.B) {
			r := newRig(b, baseSpec, func(o *Options) { o.DisableRuntime = mode.reload })
			var bundles [2][]File
			for i, echo := range []string{"C", "B"} {
				s := baseSpec(r)
				s.backend("be_app").lines[1] = "server SRV_1 " + r.echo[echo]
				bundles[i] = r.bundle(s)
			}
			start := r.reloads()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				res, err := r.drv.Apply(b.Context(), bundles[n%2])
				if err != nil {
					b.Fatal(err)
				}
				if res.Reloaded != mode.reload || (!mode.reload && len(res.RuntimeOps) != 1) {
					b.Fatalf("Apply: %+v", res)
				}
				n++
			}
			b.StopTimer()
			reloads := r.reloads() - start
			b.ReportMetric(float64(reloads)/float64(n), "reloads/op")
			want := "C"
			if n%2 == 0 {
				want = "B"
			}
			if got := r.get("app.example", "/"); got != want {
				b.Errorf("app.example answered by %q after %d applies, want %q", got, n, want)
			}
		})
	}
}
