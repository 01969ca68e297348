package renderer_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
)

// putObject stores obj as the service name and announces it.
func (f *fixture) putObject(name string, obj map[string]any) {
	f.t.Helper()
	ctx := context.Background()
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketResources)
	key := msg.ResourceKey("m", "services", "default", name)
	data, err := msg.Encode(msg.Resource{Source: "m", Type: "services", Namespace: "default", Name: name, Hash: fmt.Sprint(obj), Object: obj})
	if err != nil {
		f.t.Fatal(err)
	}
	rev, err := kv.Put(ctx, key, data)
	if err != nil {
		f.t.Fatal(err)
	}
	out, _ := msg.NewMsg(msg.ChangeSubject("m", "services"), "", msg.Change{Source: "m", Type: "services", Key: key, Op: msg.OpPut, Name: name, Revision: rev})
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		f.t.Fatal(err)
	}
}

func service(name string, port int, labels map[string]any) map[string]any {
	meta := map[string]any{"name": name, "namespace": "default"}
	if labels != nil {
		meta["labels"] = labels
	}
	return map[string]any{"metadata": meta, "spec": map[string]any{"port": port}}
}

// TestProvenanceNamesChangedObjects: a render's provenance lists the
// objects changed since the target's previous render with the fields
// that differ; a change that altered no output is listed by the next
// render that is published, and the first render of a renderer lists
// nothing (it does not know what the previous render read).
func TestProvenanceNamesChangedObjects(t *testing.T) {
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	f.putObject("web", service("web", 80, nil))
	f.putObject("api", service("api", 8000, nil))
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.synced()
	if r, _ := f.render(1); len(r.Provenance.Changed) != 0 {
		t.Fatalf("first render lists %+v", r.Provenance.Changed)
	}

	f.putObject("web", service("web", 81, nil))
	r, _ := f.render(2)
	want := []msg.ObjectChange{{Type: "services", Namespace: "default", Name: "web", Op: msg.OpPut, Fields: []string{"spec.port"}}}
	if got := withoutRevisions(r.Provenance.Changed); !reflect.DeepEqual(got, want) {
		t.Fatalf("changed = %+v, want %+v", got, want)
	}
	if r.Provenance.Changed[0].Revision == 0 || r.Provenance.Changed[0].Revision > r.Provenance.StateRevision {
		t.Fatalf("revision %d, state revision %d", r.Provenance.Changed[0].Revision, r.Provenance.StateRevision)
	}

	// A label no template reads: rendered, nothing published.
	before := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total")
	f.putObject("api", service("api", 8000, map[string]any{"team": "a"}))
	testkit.Eventually(t, 10*time.Second, func() error {
		if testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total") <= before {
			return fmt.Errorf("no render yet")
		}
		return nil
	})
	f.putObject("db", service("db", 5432, nil))
	r, _ = f.render(3)
	want = []msg.ObjectChange{
		{Type: "services", Namespace: "default", Name: "api", Op: msg.OpPut, Fields: []string{"metadata.labels"}},
		{Type: "services", Namespace: "default", Name: "db", Op: msg.OpPut, Created: true},
	}
	if got := withoutRevisions(r.Provenance.Changed); !reflect.DeepEqual(got, want) {
		t.Fatalf("changed = %+v, want %+v", got, want)
	}

	f.del("web")
	r, _ = f.render(4)
	want = []msg.ObjectChange{{Type: "services", Namespace: "default", Name: "web", Op: msg.OpDelete}}
	if got := withoutRevisions(r.Provenance.Changed); !reflect.DeepEqual(got, want) {
		t.Fatalf("changed = %+v, want %+v", got, want)
	}
}

func withoutRevisions(in []msg.ObjectChange) []msg.ObjectChange {
	out := make([]msg.ObjectChange, len(in))
	for i, c := range in {
		c.Revision = 0
		out[i] = c
	}
	return out
}
