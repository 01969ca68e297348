package kv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a Sink that keeps what it was told and checks the order of
// calls a source must follow.
type recorder struct {
	mu           sync.Mutex
	vals         map[string]store.Object
	replaces     int
	replacedAt   []time.Time // when each Replace came
	upserts      int
	deletes      int
	synced       int
	syncProblems []string
	problems     []error
	violations   []string
	// fail, when set, makes a call fail: it gets the call's name.
	fail func(op string) error
}

func newRecorder(t testing.TB) *recorder {
	r := &recorder{vals: map[string]store.Object{}}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, v := range r.violations {
			t.Errorf("sink contract: %s", v)
		}
	})
	return r
}

func (r *recorder) failing(op string) error {
	if r.fail == nil {
		return nil
	}
	return r.fail(op)
}

func (r *recorder) check(o store.Object) {
	if o.Type != config.ValuesType {
		r.violations = append(r.violations, fmt.Sprintf("object %q has type %q", o.Name, o.Type))
	}
	if o.Body["name"] != o.Name {
		r.violations = append(r.violations, fmt.Sprintf("object %q has body name %v", o.Name, o.Body["name"]))
	}
	if _, ok := o.Body["value"].(string); !ok {
		// Only a Consul service's value is a list (of instances).
		if _, list := o.Body["value"].([]any); !list || o.Body["service"] == nil {
			r.violations = append(r.violations, fmt.Sprintf("object %q has no string value", o.Name))
		}
	}
}

func (r *recorder) Replace(_ context.Context, typ string, objs []store.Object) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing("replace"); err != nil {
		return err
	}
	if typ != config.ValuesType {
		r.violations = append(r.violations, "replace of type "+typ)
	}
	r.replaces++
	r.replacedAt = append(r.replacedAt, time.Now())
	r.vals = make(map[string]store.Object, len(objs))
	for _, o := range objs {
		r.check(o)
		if _, dup := r.vals[o.Name]; dup {
			r.violations = append(r.violations, "replace holds "+o.Name+" twice")
		}
		r.vals[o.Name] = o
	}
	return nil
}

func (r *recorder) Upsert(_ context.Context, o store.Object) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing("upsert"); err != nil {
		return err
	}
	if r.synced == 0 {
		r.violations = append(r.violations, "upsert of "+o.Name+" before synced")
	}
	r.check(o)
	r.upserts++
	r.vals[o.Name] = o
	return nil
}

func (r *recorder) Delete(_ context.Context, typ, namespace, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing("delete"); err != nil {
		return err
	}
	if r.synced == 0 {
		r.violations = append(r.violations, "delete of "+name+" before synced")
	}
	if typ != config.ValuesType || namespace != "" {
		r.violations = append(r.violations, fmt.Sprintf("delete of %s/%s/%s", typ, namespace, name))
	}
	if _, ok := r.vals[name]; !ok {
		r.violations = append(r.violations, "delete of "+name+", which is not there")
	}
	r.deletes++
	delete(r.vals, name)
	return nil
}

func (r *recorder) Synced(_ context.Context, typ string, problems []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing("synced"); err != nil {
		return err
	}
	if r.replaces == 0 {
		r.violations = append(r.violations, "synced before any replace")
	}
	if r.synced > 0 {
		r.violations = append(r.violations, "synced twice")
	}
	if typ != config.ValuesType {
		r.violations = append(r.violations, "synced of type "+typ)
	}
	r.synced++
	r.syncProblems = problems
	return nil
}

func (r *recorder) Problem(_ context.Context, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.violations = append(r.violations, "nil problem")
	}
	r.problems = append(r.problems, err)
}

// values returns name -> value.
func (r *recorder) values() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.vals))
	for n, o := range r.vals {
		out[n], _ = o.Body["value"].(string)
	}
	return out
}

func (r *recorder) object(name string) (store.Object, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.vals[name]
	return o, ok
}

func (r *recorder) counts() (replaces, upserts, deletes, synced int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replaces, r.upserts, r.deletes, r.synced
}

// gaps returns the times between one Replace and the next.
func (r *recorder) gaps() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(r.replacedAt); i++ {
		out = append(out, r.replacedAt[i].Sub(r.replacedAt[i-1]))
	}
	return out
}

func (r *recorder) syncedProblems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.syncProblems)
}

func (r *recorder) problemCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.problems)
}

// problemsAfter returns the texts of the problems reported after the
// first n.
func (r *recorder) problemsAfter(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.problems[min(n, len(r.problems)):] {
		out = append(out, p.Error())
	}
	return out
}

// lastProblems returns the texts of the last few problems, for messages.
func (r *recorder) lastProblems() []string {
	n := r.problemCount()
	return r.problemsAfter(max(0, n-5))
}

func (r *recorder) problemErrors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.problems)
}

// waitSynced waits for the first complete listing.
func waitSynced(t testing.TB, r *recorder) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, _, _, s := r.counts(); s == 0 {
			return errors.New("not synced")
		}
		return nil
	})
}

// waitValues waits until the source is synced and holds exactly want.
func waitValues(t testing.TB, r *recorder, want map[string]string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, _, _, s := r.counts(); s == 0 {
			return fmt.Errorf("not synced; problems %q", r.lastProblems())
		}
		if got := r.values(); !maps.Equal(got, want) {
			return fmt.Errorf("values:\n got %s\nwant %s\nlast problems %q", describe(got), describe(want), r.lastProblems())
		}
		return nil
	})
}

// waitProblem waits for a problem reported after the first n that
// contains every one of parts, and returns it.
func waitProblem(t testing.TB, r *recorder, n int, parts ...string) string {
	t.Helper()
	var found string
	testkit.Eventually(t, 30*time.Second, func() error {
		for _, p := range r.problemsAfter(n) {
			all := true
			for _, part := range parts {
				all = all && strings.Contains(p, part)
			}
			if all {
				found = p
				return nil
			}
		}
		return fmt.Errorf("no problem containing %q; last problems %q", parts, r.lastProblems())
	})
	return found
}

func describe(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	b.WriteString("}")
	return b.String()
}

// start runs src with sink until the test ends (or stop is called), and
// fails the test if Run returns anything but nil or takes long to stop.
func start(t testing.TB, src source.Source, sink source.Sink) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// mustNew is New that fails the test on error.
func mustNew(t testing.TB, src config.Source, opts ...Option) source.Source {
	t.Helper()
	s, err := New(src, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// fast are options that keep retries quick in tests.
var fast = []Option{WithBackoff(20*time.Millisecond, 300*time.Millisecond)}

func opts(extra ...Option) []Option { return append(slices.Clone(fast), extra...) }
