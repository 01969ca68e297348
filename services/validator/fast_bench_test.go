package validator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/svc/gather"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/validator/fastpath"
)

// ingressObjects are n Ingresses (one host, two paths) of the ingress
// library's class, their Services and EndpointSlices of three endpoints;
// gen[i] shifts the addresses of the i-th slice.
func ingressObjects(n int, gen map[int]int) []struct {
	typ, id string
	obj     map[string]any
} {
	type object = struct {
		typ, id string
		obj     map[string]any
	}
	out := make([]object, 0, 3*n)
	for i := range n {
		ns, name := fmt.Sprintf("team-%02d", i%20), fmt.Sprintf("app-%05d", i)
		backend := func(port any) map[string]any {
			return map[string]any{"service": map[string]any{"name": name, "port": port}}
		}
		out = append(out, object{"ingresses", ns + "/" + name, map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{"ingressClassName": "haproxy", "rules": []any{map[string]any{
				"host": name + ".example.com",
				"http": map[string]any{"paths": []any{
					map[string]any{"path": "/", "pathType": "Prefix", "backend": backend(map[string]any{"name": "http"})},
					map[string]any{"path": "/api", "pathType": "Exact", "backend": backend(map[string]any{"number": 8080})},
				}},
			}}},
		}})
		out = append(out, object{"services", ns + "/" + name, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{"ports": []any{
				map[string]any{"name": "http", "port": 80, "targetPort": 8080},
				map[string]any{"name": "api", "port": 8080, "targetPort": 9090},
			}},
		}})
		eps := make([]any, 3)
		for k := range eps {
			eps[k] = map[string]any{"addresses": []any{fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, (k+gen[i])%250+1)}}
		}
		out = append(out, object{"endpoints", ns + "/" + name + "-x7k2q", map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
			"metadata":  map[string]any{"namespace": ns, "name": name + "-x7k2q", "labels": map[string]any{"kubernetes.io/service-name": name}},
			"endpoints": eps,
			"ports":     []any{map[string]any{"name": "http", "port": 8080}, map[string]any{"name": "api", "port": 9090}},
		}})
	}
	return out
}

// ingressBundles renders n Ingresses with the ingress library, then k
// renders more, each after one EndpointSlice changed (a new address in a
// server slot: a runtime-only change from the first), the k EndpointSlices
// spread over the n; then one render with all k changed (a base k renders
// behind).
func ingressBundles(b *testing.B, n, k int) (base msg.Bundle, cands []msg.Bundle, behind msg.Bundle) {
	ix, err := index.New([]index.Spec{
		{Type: "endpoints", IndexBy: []string{"metadata.namespace", "metadata.labels['kubernetes.io/service-name']"}},
		{Type: "ingressclasses", IndexBy: []string{"metadata.name"}},
		{Type: "ingresses", IndexBy: []string{"metadata.namespace", "metadata.name"}},
		{Type: "secrets", IndexBy: []string{"metadata.namespace", "metadata.name"}},
		{Type: "services", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	rev := uint64(0)
	for _, o := range ingressObjects(n, nil) {
		rev++
		ix.Upsert(o.typ, o.id, rev, o.obj)
	}
	tg, err := target.Compile("edge", config.Target{Library: "ingress", LibraryOptions: map[string]string{"ingress_class": "haproxy"}, Base: "/etc/haproxy"})
	if err != nil {
		b.Fatal(err)
	}
	// As the renderer does: each index change marks the fragment entries
	// it affects, so the next render redoes them.
	ix.Observe(func(c index.Change) {
		tg.Invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	render := func() msg.Bundle {
		res, err := tg.Render(context.Background(), ix.Stores(), nil)
		if err != nil || len(res.Errors) > 0 {
			b.Fatalf("render: %v %v", err, res.Errors)
		}
		return res.Bundle
	}
	update := func(gen map[int]int) msg.Bundle {
		for _, o := range ingressObjects(n, gen) {
			rev++
			ix.Upsert(o.typ, o.id, rev, o.obj)
		}
		return render()
	}
	base = render()
	all := map[int]int{}
	for i := range k {
		cands = append(cands, update(map[int]int{i * (n / k): 100 + i}))
		all[i*(n/k)] = 100 + i
	}
	return base, cands, update(all)
}

// BenchmarkFastVerdict validates, through the whole scatter-gather of a
// running validator (request over NATS, the haproxy kind reads the
// candidate from the object store), renders of 1,000 and 10,000 Ingresses with the
// ingress library that differ from the base bundle in one EndpointSlice:
// with the base named (the fast path: the candidate is read, decoded and
// diffed against the cached base) and, measured in the same run as the
// reference, without it (the whole `haproxy -c`: BenchmarkScatterGather's
// path). It reports fast-ms and full-ms per validation and x-faster, their
// ratio, prove-ms: fastpath.Prove alone on decoded bundles, and
// prove-behind-ms: Prove of a render that differs from the base in all the
// candidates' changes at once, far apart in the file. The candidates cycle through more bundles than the kind's cache
// holds, so every validation reads and decodes its candidate as a new
// render's would.
func BenchmarkFastVerdict(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) { benchFast(b, n) })
	}
}

func benchFast(b *testing.B, ingresses int) {
	testkit.HAProxy(b)
	bus := testkit.NATS(b)
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		b.Fatal(err)
	}
	env := testkit.NewEnv(b, bus, "v1")
	env.Env.Log = telemetry.NewLogger(io.Discard, slog.LevelError)
	testkit.Run(b, func(ctx context.Context) error { return validator.Run(ctx, env.Env, cfg) })
	base, cands, behind := ingressBundles(b, ingresses, 8)
	obs, _ := bus.JS.ObjectStore(context.Background(), msg.ObjectBundles)
	for _, bnd := range append([]msg.Bundle{base}, cands...) {
		data, _ := msg.EncodeBundle(bnd)
		if _, err := obs.PutBytes(context.Background(), bnd.Hash, data); err != nil {
			b.Fatal(err)
		}
	}
	proveStart := time.Now()
	for _, c := range cands {
		if r, err := fastpath.Prove(base, c); err != nil || r.Servers == 0 {
			b.Fatalf("the candidates must differ from the base in server lines only: %+v %v", r, err)
		}
	}
	prove := time.Since(proveStart) / time.Duration(len(cands))
	behindStart := time.Now()
	for range len(cands) {
		if r, err := fastpath.Prove(base, behind); err != nil || r.Servers < len(cands) {
			b.Fatalf("the render with every change must differ from the base in %d places, each in server lines only: %+v %v", len(cands), r, err)
		}
	}
	proveBehind := time.Since(behindStart) / time.Duration(len(cands))
	validate := func(i int, baseHash string) msg.ValidateReply {
		c := cands[i%len(cands)]
		res, err := gather.Validate(context.Background(), bus.NC, msg.ValidateSubject("edge"),
			msg.ValidateRequest{Target: "edge", Version: uint64(i + 2), BundleHash: c.Hash, Base: baseHash}, []string{"haproxy"}, 60*time.Second)
		if err != nil || !res.OK() {
			b.Fatalf("validation: %v %+v", err, res)
		}
		return res.Replies[0]
	}
	var full []time.Duration
	for i := range 5 {
		start := time.Now()
		if validate(i, "").Provisional {
			b.Fatal("a request without a base was answered provisionally")
		}
		full = append(full, time.Since(start))
	}
	slices.Sort(full)
	if !validate(0, base.Hash).Provisional {
		b.Fatal("a runtime-only change was not proven")
	}
	start := time.Now()
	n := 0
	for b.Loop() {
		validate(n, base.Hash)
		n++
	}
	per := time.Since(start) / time.Duration(n)
	med := full[len(full)/2]
	b.ReportMetric(float64(per.Microseconds())/1000, "fast-ms")
	b.ReportMetric(float64(med.Microseconds())/1000, "full-ms")
	b.ReportMetric(float64(med)/float64(per), "x-faster")
	b.ReportMetric(float64(prove.Microseconds())/1000, "prove-ms")
	b.ReportMetric(float64(proveBehind.Microseconds())/1000, "prove-behind-ms")
}
