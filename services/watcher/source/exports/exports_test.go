package exports_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher/source/exports"
	"github.com/weftio/weft/services/watcher/store"
)

const wait = 30 * time.Second

// recorder is a sink that keeps every call in order.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	op       string // replace, synced, problem (the source makes no other)
	values   []store.Object
	problems []string
	err      error
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *recorder) Replace(_ context.Context, typ string, objects []store.Object) error {
	if typ != config.ValuesType {
		r.add(call{op: "replace of type " + typ})
		return nil
	}
	r.add(call{op: "replace", values: objects})
	return nil
}

func (r *recorder) Upsert(context.Context, store.Object) error {
	r.add(call{op: "upsert"})
	return nil
}

func (r *recorder) Delete(context.Context, string, string, string) error {
	r.add(call{op: "delete"})
	return nil
}

func (r *recorder) Synced(_ context.Context, typ string, problems []string) error {
	if typ != config.ValuesType {
		r.add(call{op: "synced of type " + typ})
		return nil
	}
	r.add(call{op: "synced", problems: problems})
	return nil
}

func (r *recorder) Problem(_ context.Context, err error) {
	r.add(call{op: "problem", err: err})
}

func (r *recorder) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// replaces returns the values of every Replace, each as name -> value.
func (r *recorder) replaces() []map[string]string {
	var out []map[string]string
	for _, c := range r.all() {
		if c.op == "replace" {
			m := map[string]string{}
			for _, v := range c.values {
				m[v.Name] = v.Body["value"].(string)
			}
			out = append(out, m)
		}
	}
	return out
}

// last returns the values of the last Replace.
func (r *recorder) last() map[string]string {
	rs := r.replaces()
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)-1]
}

// synced returns the problems of the last Synced, and whether there was one.
func (r *recorder) synced() ([]string, bool) {
	calls := r.all()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].op == "synced" {
			return calls[i].problems, true
		}
	}
	return nil, false
}

func (r *recorder) problems() []error {
	var out []error
	for _, c := range r.all() {
		if c.op == "problem" {
			out = append(out, c.err)
		}
	}
	return out
}

func (r *recorder) ops() []string {
	var out []string
	for _, c := range r.all() {
		if c.op != "problem" {
			out = append(out, c.op)
		}
	}
	return out
}

func exportOf(cm string, keys ...string) config.Export {
	e := config.Export{ConfigMap: cm}
	for _, k := range keys {
		key, as, _ := strings.Cut(k, " as ")
		e.Keys = append(e.Keys, config.ExportKey{Key: key, As: as})
	}
	return e
}

func start(t *testing.T, o exports.Options) (*exports.Source, *recorder) {
	t.Helper()
	src, err := exports.New(o)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ignore := goleak.IgnoreCurrent()
	stop := testkit.Run(t, func(ctx context.Context) error { return src.Run(ctx, rec) })
	t.Cleanup(func() {
		stop()
		goleak.VerifyNone(t, ignore)
	})
	return src, rec
}

type cluster struct {
	*kubetest.Env
}

func (c cluster) namespace(t *testing.T, name string) {
	t.Helper()
	_, err := c.Clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (c cluster) put(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cms := c.Clientset.CoreV1().ConfigMaps(ns)
	cur, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	cur.Data = data
	if _, err := cms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestExports(t *testing.T) {
	c := cluster{kubetest.Start(t)}
	t.Run("values", func(t *testing.T) { testValues(t, c) })
	t.Run("missing", func(t *testing.T) { testMissing(t, c) })
	t.Run("forbidden", func(t *testing.T) { testForbidden(t, c) })
	t.Run("resync", func(t *testing.T) { testResync(t, c) })
}

func testValues(t *testing.T, c cluster) {
	c.namespace(t, "infra")
	c.put(t, "infra", "terraform-outputs", map[string]string{"vpc_id": "vpc-1", "eks_cluster_endpoint": "https://eks", "unrelated": "a"})
	c.put(t, "kube-system", "cluster-info", map[string]string{"kubeconfig": "kc", "jws-kubeconfig-abc": "jws"})
	_, rec := start(t, exports.Options{Config: c.Config, Exports: []config.Export{
		exportOf("infra/terraform-outputs", "vpc_id", "eks_cluster_endpoint as cluster_endpoint"),
		exportOf("kube-system/cluster-info", "kubeconfig"),
	}})

	testkit.Eventually(t, wait, func() error {
		if _, ok := rec.synced(); !ok {
			return errors.New("not synced")
		}
		return nil
	})
	if ops := rec.ops(); !slices.Equal(ops[:2], []string{"replace", "synced"}) {
		t.Fatalf("calls %v, want replace then synced first", ops)
	}
	if problems, _ := rec.synced(); len(problems) != 0 {
		t.Errorf("synced with problems %q", problems)
	}
	first := rec.all()[0].values
	want := []struct{ name, value, configmap, key string }{
		{"cluster_endpoint", "https://eks", "infra/terraform-outputs", "eks_cluster_endpoint"},
		{"kubeconfig", "kc", "kube-system/cluster-info", "kubeconfig"},
		{"vpc_id", "vpc-1", "infra/terraform-outputs", "vpc_id"},
	}
	if len(first) != len(want) {
		t.Fatalf("values %v, want %d", first, len(want))
	}
	for i, w := range want {
		v := first[i]
		if v.Type != config.ValuesType || v.Name != w.name || v.Body["name"] != w.name || v.Body["value"] != w.value ||
			v.Body["configmap"] != w.configmap || v.Body["key"] != w.key {
			t.Errorf("value %d = %+v, want %+v", i, v, w)
		}
	}

	steps := []struct {
		name     string
		data     map[string]string
		want     map[string]string
		replaced bool // a new Replace is expected
	}{
		{"unexported key changes", map[string]string{"vpc_id": "vpc-1", "eks_cluster_endpoint": "https://eks", "unrelated": "b"}, nil, false},
		{"exported key changes", map[string]string{"vpc_id": "vpc-2", "eks_cluster_endpoint": "https://eks", "unrelated": "b"}, map[string]string{"cluster_endpoint": "https://eks", "kubeconfig": "kc", "vpc_id": "vpc-2"}, true},
		{"renamed key changes", map[string]string{"vpc_id": "vpc-2", "eks_cluster_endpoint": "https://eks2", "unrelated": "b"}, map[string]string{"cluster_endpoint": "https://eks2", "kubeconfig": "kc", "vpc_id": "vpc-2"}, true},
	}
	// A change that exports nothing new reports nothing: the Replace after
	// it is the one of the next step's change, and no Replace repeats the
	// values before it.
	since := len(rec.replaces())
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			c.put(t, "infra", "terraform-outputs", s.data)
			if !s.replaced {
				return
			}
			testkit.Eventually(t, wait, func() error {
				if got := rec.last(); !maps.Equal(got, s.want) {
					return fmt.Errorf("values %v, want %v", got, s.want)
				}
				return nil
			})
			if n := len(rec.replaces()) - since; n != 1 {
				t.Errorf("%d Replaces since the last exported change, want 1: %v", n, rec.replaces()[since:])
			}
			since = len(rec.replaces())
		})
	}
}

func testMissing(t *testing.T, c cluster) {
	c.namespace(t, "gaps")
	c.put(t, "gaps", "partial", map[string]string{"present": "p", "kubeconfig": "kc", "jws-kubeconfig-abc": "j"})
	_, rec := start(t, exports.Options{Config: c.Config, Exports: []config.Export{
		exportOf("gaps/absent", "a"),
		exportOf("gaps/partial", "present", "ca as ca_bundle"),
	}})
	testkit.Eventually(t, wait, func() error {
		if _, ok := rec.synced(); !ok {
			return errors.New("not synced")
		}
		return nil
	})
	wantProblems := []string{
		`configmap gaps/absent not found`,
		`configmap gaps/partial has no key "ca"; available: jws-kubeconfig-abc, kubeconfig, present`,
	}
	problems, _ := rec.synced()
	if !slices.Equal(problems, wantProblems) {
		t.Errorf("synced problems\n%q\nwant\n%q", problems, wantProblems)
	}
	var reported []string
	for _, err := range rec.problems() {
		if !errors.Is(err, exports.ErrMissing) {
			t.Errorf("problem %v does not match ErrMissing", err)
		}
		reported = append(reported, err.Error())
	}
	slices.Sort(reported) // reported as each ConfigMap is first read
	if !slices.Equal(reported, wantProblems) {
		t.Errorf("reported problems %q, want %q", reported, wantProblems)
	}
	if got := rec.last(); !maps.Equal(got, map[string]string{"present": "p"}) {
		t.Errorf("values %v, want the one present", got)
	}

	steps := []struct {
		name     string
		ns, cm   string
		data     map[string]string
		want     map[string]string
		problems []string
	}{
		{"configmap created", "gaps", "absent", map[string]string{"a": "1"},
			map[string]string{"present": "p", "a": "1"}, wantProblems[1:]},
		{"key added", "gaps", "partial", map[string]string{"present": "p", "ca": "pem"},
			map[string]string{"present": "p", "a": "1", "ca_bundle": "pem"}, nil},
		{"key removed", "gaps", "absent", map[string]string{"b": "2"},
			map[string]string{"present": "p", "ca_bundle": "pem"}, []string{`configmap gaps/absent has no key "a"; available: b`}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			c.put(t, s.ns, s.cm, s.data)
			testkit.Eventually(t, wait, func() error {
				if got := rec.last(); !maps.Equal(got, s.want) {
					return fmt.Errorf("values %v, want %v", got, s.want)
				}
				if got, _ := rec.synced(); !slices.Equal(got, s.problems) {
					return fmt.Errorf("synced problems %q, want %q", got, s.problems)
				}
				return nil
			})
		})
	}
}

func testForbidden(t *testing.T, c cluster) {
	ctx := context.Background()
	c.namespace(t, "open")
	c.namespace(t, "locked")
	c.put(t, "open", "shared", map[string]string{"region": "eu-1"})
	c.put(t, "locked", "private", map[string]string{"token": "t"})
	// The reader may read open/shared, by name only, and nothing in locked.
	grant := func(ns, name string) {
		t.Helper()
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "read-" + name},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name},
				Verbs: []string{"get", "list", "watch"},
			}},
		}
		if _, err := c.Clientset.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "read-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "reader"}},
		}
		if _, err := c.Clientset.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grant("open", "shared")
	reader := c.User(t, "reader")
	_, rec := start(t, exports.Options{
		Config:   rest.CopyConfig(reader),
		Exports:  []config.Export{exportOf("open/shared", "region"), exportOf("locked/private", "token")},
		RetryMin: 100 * time.Millisecond,
		RetryMax: time.Second,
	})
	testkit.Eventually(t, wait, func() error {
		if _, ok := rec.synced(); !ok {
			return errors.New("not synced")
		}
		return nil
	})
	problems, _ := rec.synced()
	if len(problems) != 1 || !strings.Contains(problems[0], "configmap locked/private: cannot read it (retrying)") || !strings.Contains(problems[0], "forbidden") {
		t.Fatalf("synced problems %q, want one saying locked/private is forbidden", problems)
	}
	if got := rec.last(); !maps.Equal(got, map[string]string{"region": "eu-1"}) {
		t.Errorf("values %v, want the readable one", got)
	}
	if ps := rec.problems(); len(ps) == 0 || !strings.Contains(ps[0].Error(), "forbidden") {
		t.Errorf("problems %v, want the permission error reported", ps)
	}

	// Once permission is granted, a retry picks the value up.
	grant("locked", "private")
	testkit.Eventually(t, wait, func() error {
		if got := rec.last(); !maps.Equal(got, map[string]string{"region": "eu-1", "token": "t"}) {
			return fmt.Errorf("values %v", got)
		}
		if got, _ := rec.synced(); len(got) != 0 {
			return fmt.Errorf("synced problems %q", got)
		}
		return nil
	})
}

func testResync(t *testing.T, c cluster) {
	c.namespace(t, "again")
	c.put(t, "again", "cm", map[string]string{"k": "v"})
	src, rec := start(t, exports.Options{
		Config:  c.Config,
		Exports: []config.Export{exportOf("again/cm", "k")},
		Resync:  200 * time.Millisecond,
	})
	testkit.Eventually(t, wait, func() error {
		if _, ok := rec.synced(); !ok {
			return errors.New("not synced")
		}
		return nil
	})
	other := &recorder{}
	if err := src.Resync(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if ops := other.ops(); !slices.Equal(ops, []string{"replace"}) {
		t.Fatalf("Resync reported %v, want one replace", ops)
	}
	if got := other.last(); !maps.Equal(got, map[string]string{"k": "v"}) {
		t.Errorf("Resync values %v", got)
	}
	// Periodic re-reads of an unchanged ConfigMap report nothing new.
	c.put(t, "again", "cm", map[string]string{"k": "w"})
	testkit.Eventually(t, wait, func() error {
		if got := rec.last(); !maps.Equal(got, map[string]string{"k": "w"}) {
			return fmt.Errorf("values %v", got)
		}
		return nil
	})
	for i, vals := range rec.replaces() {
		if i > 0 && maps.Equal(vals, rec.replaces()[i-1]) {
			t.Errorf("replace %d repeats the values before it: %v", i, vals)
		}
	}
}

func TestNewRejects(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	cases := []struct {
		name    string
		exports []config.Export
		want    string
	}{
		{"no namespace", []config.Export{exportOf("cm", "k")}, "must be <namespace>/<name>"},
		{"empty name", []config.Export{exportOf("ns/", "k")}, "must be <namespace>/<name>"},
		{"empty key", []config.Export{{ConfigMap: "ns/cm", Keys: []config.ExportKey{{}}}}, "a key without a name"},
		{"nothing", nil, "nothing to export"},
		{"value twice", []config.Export{exportOf("a/cm", "k"), exportOf("b/cm", "x as k")}, `value "k" is exported twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := exports.New(exports.Options{Config: cfg, Exports: c.exports})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New = %v, want an error saying %s", err, c.want)
			}
		})
	}
	if _, err := exports.New(exports.Options{Exports: []config.Export{exportOf("a/b", "k")}}); err == nil {
		t.Error("New without a config succeeded")
	}
}

func TestMissingError(t *testing.T) {
	cases := []struct {
		err  exports.MissingError
		want string
	}{
		{exports.MissingError{ConfigMap: "kube-system/cluster-info", Key: "ca", Available: []string{"jws-kubeconfig-abc", "kubeconfig"}},
			`configmap kube-system/cluster-info has no key "ca"; available: jws-kubeconfig-abc, kubeconfig`},
		{exports.MissingError{ConfigMap: "a/b", Key: "k"}, `configmap a/b has no key "k"; available: none`},
		{exports.MissingError{ConfigMap: "a/b"}, `configmap a/b not found`},
		{exports.MissingError{ConfigMap: "a/b", Key: "blob", Binary: true, Available: []string{"x"}},
			`configmap a/b has key "blob" only in binaryData, which is not exported; data keys: x`},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if !errors.Is(&c.err, exports.ErrMissing) {
			t.Errorf("%q does not match ErrMissing", c.want)
		}
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, rec := start(t, exports.Options{
		Config:   &rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		Exports:  []config.Export{exportOf("ns/cm", "k")},
		RetryMin: 50 * time.Millisecond,
	})
	testkit.Eventually(t, wait, func() error {
		for _, p := range rec.problems() {
			if strings.Contains(p.Error(), "configmap ns/cm: cannot read it (retrying)") && strings.Contains(p.Error(), "connection refused") {
				return nil
			}
		}
		return fmt.Errorf("problems %v", rec.problems())
	})
	if ops := rec.ops(); len(ops) != 0 {
		t.Errorf("an unreachable server gave %v; values must not sync half-read", ops)
	}
}
