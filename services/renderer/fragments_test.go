package renderer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
)

const fragmentsCfg = `
sources: [{name: m, type: manifests, path: unused}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress, index_by: ["metadata.namespace", "metadata.name"]}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice, index_by: ["metadata.namespace", "metadata.labels['kubernetes.io/service-name']"]}
targets:
  edge:
    base: /etc/haproxy
    deploy: {driver: files, dest: /tmp/unused}
    fragments:
      backends:
        for_each: ingresses
        template: |
          backend {{ obj.metadata.name }}
          {%- for s in resources.endpoints.get_indexed(obj.metadata.namespace, obj.spec.service) %}
          {%- for a in s.addresses %}
            server {{ a }}
          {%- endfor %}
          {%- endfor %}
    maps:
      names.map:
        template: |
          {% for id, _ in resources.ingresses.items() %}{{ id }}
          {% endfor %}
    haproxy_config:
      template: |
        {{ fragments("backends") }}
`

func putObject(t *testing.T, b *testkit.Bus, typ, name string, obj map[string]any) {
	t.Helper()
	ctx := context.Background()
	kv, _ := b.JS.KeyValue(ctx, msg.BucketResources)
	key := msg.ResourceKey("m", typ, "default", name)
	data, err := msg.Encode(msg.Resource{Source: "m", Type: typ, Namespace: "default", Name: name, Hash: fmt.Sprint(obj), Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, key, data)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := msg.NewMsg(msg.ChangeSubject("m", typ), "", msg.Change{Source: "m", Type: typ, Key: key, Op: msg.OpPut, Name: name, Revision: rev})
	if _, err := b.JS.PublishMsg(ctx, out); err != nil {
		t.Fatal(err)
	}
}

func syncType(t *testing.T, b *testkit.Bus, typ string) {
	t.Helper()
	ctx := context.Background()
	status, _ := b.JS.KeyValue(ctx, msg.BucketStatus)
	data, _ := msg.Encode(msg.SyncStatus{Source: "m", Type: typ, Synced: true})
	if _, err := status.Put(ctx, msg.SyncStatusKey("m", typ), data); err != nil {
		t.Fatal(err)
	}
	out, _ := msg.NewMsg(msg.SyncSubject("m", typ), "", msg.Sync{Source: "m", Type: typ})
	if _, err := b.JS.PublishMsg(ctx, out); err != nil {
		t.Fatal(err)
	}
}

// outcomes sums the counter vector name of one outcome over its targets.
func outcomes(t *testing.T, env *testkit.Env, name, outcome string) float64 {
	t.Helper()
	fams, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// fragmentEntries sums weft_renderer_fragment_entries_total of one outcome.
func fragmentEntries(t *testing.T, env *testkit.Env, outcome string) float64 {
	return outcomes(t, env, "weft_renderer_fragment_entries_total", outcome)
}

// TestFragmentsFollowChanges: after the first render, an EndpointSlice
// change re-renders only the fragment of the Ingress that looks it up, and
// only the output that reads the fragment (not the map, which reads only
// the Ingresses).
func TestFragmentsFollowChanges(t *testing.T) {
	cfg, err := config.Parse([]byte(fragmentsCfg), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	ingress := func(name, svc string) map[string]any {
		return map[string]any{"metadata": map[string]any{"namespace": "default", "name": name}, "spec": map[string]any{"service": svc}}
	}
	slice := func(name, svc string, addrs ...any) map[string]any {
		return map[string]any{"metadata": map[string]any{"namespace": "default", "name": name, "labels": map[string]any{"kubernetes.io/service-name": svc}}, "addresses": addrs}
	}
	putObject(t, f.bus, "ingresses", "web", ingress("web", "web"))
	putObject(t, f.bus, "ingresses", "api", ingress("api", "api"))
	putObject(t, f.bus, "endpoints", "web-1", slice("web-1", "web", "10.0.0.1"))
	putObject(t, f.bus, "endpoints", "api-1", slice("api-1", "api", "10.0.1.1"))
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	syncType(t, f.bus, "ingresses")
	syncType(t, f.bus, "endpoints")

	_, b := f.render(1)
	if got, want := file(b, "haproxy.cfg"), "backend api\n  server 10.0.1.1\nbackend web\n  server 10.0.0.1\n\n"; got != want {
		t.Fatalf("haproxy.cfg = %q, want %q", got, want)
	}
	// Let renders caused by the start, the lease and the markers settle.
	time.Sleep(300 * time.Millisecond)
	rendered, reused := fragmentEntries(t, f.env, "rendered"), fragmentEntries(t, f.env, "reused")
	const outputs = "weft_renderer_outputs_total"
	outRendered, outReused := outcomes(t, f.env, outputs, "rendered"), outcomes(t, f.env, outputs, "reused")
	if rendered != 2 {
		t.Fatalf("%v entries rendered for the first render(s), want 2", rendered)
	}

	putObject(t, f.bus, "endpoints", "web-1", slice("web-1", "web", "10.0.0.1", "10.0.0.2"))
	_, b = f.render(2)
	if got, want := file(b, "haproxy.cfg"), "backend api\n  server 10.0.1.1\nbackend web\n  server 10.0.0.1\n  server 10.0.0.2\n\n"; got != want {
		t.Fatalf("haproxy.cfg = %q, want %q", got, want)
	}
	if n := fragmentEntries(t, f.env, "rendered") - rendered; n != 1 {
		t.Errorf("the change rendered %v entries, want 1", n)
	}
	if n := fragmentEntries(t, f.env, "reused") - reused; n < 1 {
		t.Errorf("the change reused %v entries, want at least 1", n)
	}
	if n := outcomes(t, f.env, outputs, "rendered") - outRendered; n != 1 {
		t.Errorf("the change ran %v outputs, want 1 (haproxy.cfg)", n)
	}
	if n := outcomes(t, f.env, outputs, "reused") - outReused; n != 1 {
		t.Errorf("the change reused %v outputs, want 1 (names.map)", n)
	}
}
