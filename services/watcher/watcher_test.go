package watcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/watcher"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

const cfgYAML = `
sources:
  - name: m
    type: manifests
    path: manifests
watched_resources:
  services:
    api_version: v1
    kind: Service
targets: {}
`

func svcYAML(name, port string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: default
  managedFields: [{manager: kubectl}]
spec:
  ports: [{port: %s}]
`, name, port)
}

type fixture struct {
	t   *testing.T
	dir string
	bus *testkit.Bus
	cfg *config.Config
}

func newFixture(t *testing.T) *fixture {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(cfgYAML), dir)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, dir: dir, bus: testkit.NATS(t), cfg: cfg}
}

func (f *fixture) write(name, content string) {
	f.t.Helper()
	p := filepath.Join(f.dir, "manifests", name)
	if err := os.WriteFile(p+".tmp~", []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(p+".tmp~", p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) start(replica string) (*testkit.Env, func()) {
	env := testkit.NewEnv(f.t, f.bus, replica)
	stop := testkit.Run(f.t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, f.cfg) })
	return env, stop
}

// changes returns every change message so far.
func (f *fixture) changes() []msg.Change {
	f.t.Helper()
	ctx := context.Background()
	c, err := f.bus.JS.OrderedConsumer(ctx, msg.StreamChanges, jetstream.OrderedConsumerConfig{FilterSubjects: []string{msg.ChangeAll}})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []msg.Change
	for {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			f.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ch msg.Change
			if err := msg.Decode(m.Data(), &ch); err != nil {
				f.t.Fatal(err)
			}
			out = append(out, ch)
		}
		if n == 0 {
			return out
		}
	}
}

func (f *fixture) resource(key string) (msg.Resource, error) {
	kv, err := f.bus.JS.KeyValue(context.Background(), msg.BucketResources)
	if err != nil {
		return msg.Resource{}, err
	}
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		return msg.Resource{}, err
	}
	var r msg.Resource
	return r, msg.Decode(e.Value(), &r)
}

func TestWatcherStoresAndAnnounces(t *testing.T) {
	f := newFixture(t)
	f.write("a.yaml", svcYAML("web", "80"))
	env, stop := f.start("w1")
	key := msg.ResourceKey("m", "services", "default", "web")
	testkit.Eventually(t, 10*time.Second, func() error { _, err := f.resource(key); return err })
	r, _ := f.resource(key)
	if _, ok := r.Object["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("managedFields stored")
	}
	cs := f.changes()
	if len(cs) != 1 || cs[0].Key != key || cs[0].Op != msg.OpPut || !cs[0].Initial {
		t.Fatalf("changes = %+v", cs)
	}

	// A step whose edit leaves every document as it was (quiet) stores
	// nothing, so no apply shows that its pass is done: it waits, and a
	// change its pass made late would show in the next step.
	steps := []struct {
		name  string
		act   func()
		wants []string // op:key of new changes
		quiet bool
	}{
		{"same content again", func() { f.write("a.yaml", svcYAML("web", "80")) }, nil, true},
		{"content change", func() { f.write("a.yaml", svcYAML("web", "81")) }, []string{"put:" + key}, false},
		{"moved to another file", func() {
			_ = os.Remove(filepath.Join(f.dir, "manifests", "a.yaml"))
			f.write("b.yaml", svcYAML("web", "81"))
		}, nil, false},
		{"broken file keeps its objects", func() { f.write("b.yaml", "apiVersion: v1\nkind: [") }, nil, false},
		{"fixed and deleted", func() { f.write("b.yaml", "# empty\n") }, []string{"delete:" + key}, false},
	}
	seen := len(cs)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			// A pass that read the edit either applied an object or
			// reported the file as broken.
			applies := testkit.CounterValue(t, env.Registry, "weft_watcher_apply_duration_seconds")
			problems := testkit.CounterValue(t, env.Registry, "weft_watcher_source_errors_total")
			st.act()
			testkit.Eventually(t, 10*time.Second, func() error {
				if st.quiet {
					return nil
				}
				if testkit.CounterValue(t, env.Registry, "weft_watcher_apply_duration_seconds") <= applies &&
					testkit.CounterValue(t, env.Registry, "weft_watcher_source_errors_total") <= problems {
					return fmt.Errorf("no apply yet")
				}
				return nil
			})
			// Let a second event of the same edit settle too.
			time.Sleep(300 * time.Millisecond)
			cs := f.changes()
			var got []string
			for _, c := range cs[seen:] {
				got = append(got, string(c.Op)+":"+c.Key)
			}
			seen = len(cs)
			if strings.Join(got, ",") != strings.Join(st.wants, ",") {
				t.Fatalf("new changes = %v, want %v", got, st.wants)
			}
		})
	}
	if !strings.Contains(env.Logs.String(), "source problem") {
		t.Error("broken manifest not logged")
	}
	// Changes are counted by source, type and op, as the change subjects
	// name them (weft.change.<source>.<type>).
	for op, want := range map[string]float64{"put": 2, "delete": 1} {
		if n := testkit.LabeledValue(t, env.Registry, "weft_watcher_changes_total", map[string]string{"source": "m", "type": "services", "op": op}); n != want {
			t.Errorf("weft_watcher_changes_total{source=m,type=services,op=%s} = %v, want %v", op, n, want)
		}
	}
	stop()
}

// TestReplicasAnnounceOnce runs three watchers on one folder: each change is
// stored and announced once, and killing one loses nothing.
func TestReplicasAnnounceOnce(t *testing.T) {
	f := newFixture(t)
	f.write("a.yaml", svcYAML("web", "80"))
	var stops []func()
	for i := range 3 {
		_, stop := f.start(fmt.Sprintf("w%d", i))
		stops = append(stops, stop)
	}
	for i := range 20 {
		f.write(fmt.Sprintf("s%d.yaml", i), svcYAML(fmt.Sprintf("s%d", i), "80"))
	}
	stops[0]() // one replica dies mid-stream
	for i := 20; i < 30; i++ {
		f.write(fmt.Sprintf("s%d.yaml", i), svcYAML(fmt.Sprintf("s%d", i), "80"))
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		keys := map[string]int{}
		for _, c := range f.changes() {
			keys[c.Key]++
		}
		if len(keys) != 31 {
			return fmt.Errorf("%d keys announced, want 31", len(keys))
		}
		for k, n := range keys {
			if n != 1 {
				return fmt.Errorf("%s announced %d times", k, n)
			}
		}
		return nil
	})
}

func TestResyncTrigger(t *testing.T) {
	f := newFixture(t)
	f.write("a.yaml", svcYAML("web", "80"))
	env, _ := f.start("w1")
	key := msg.ResourceKey("m", "services", "default", "web")
	testkit.Eventually(t, 10*time.Second, func() error { _, err := f.resource(key); return err })
	applies := testkit.CounterValue(t, env.Registry, "weft_watcher_apply_duration_seconds")
	testkit.Eventually(t, 10*time.Second, func() error {
		resp, err := f.bus.NC.Request(msg.TriggerResyncSubject("m"), nil, 5*time.Second)
		if err != nil {
			return err
		}
		if string(resp.Data) != "ok" {
			return fmt.Errorf("reply %q", resp.Data)
		}
		return nil
	})
	if testkit.CounterValue(t, env.Registry, "weft_watcher_apply_duration_seconds") <= applies {
		t.Fatal("resync did not re-read the source")
	}
}
