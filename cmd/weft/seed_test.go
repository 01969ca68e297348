package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/weftio/weft/cmd/weft/internal/offline"
	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
	"github.com/weftio/weft/services/watcher/source/manifests"
)

// The design seed's "Configuration Example", verbatim, and objects for it.
const (
	seedConfig    = "../../examples/seed/weft.yaml"
	seedManifests = "../../examples/seed/manifests"
)

// TestSeedConfigRender: `weft render` takes the seed's configuration as
// written; what it renders is what Python's Jinja2 renders from the same
// templates over the same objects, file by file, with the same registered
// errors, and `weft validate` (haproxy -c included) accepts it.
func TestSeedConfigRender(t *testing.T) {
	testkit.HAProxy(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := run([]string{"render", "--config", seedConfig, "--resources", seedManifests, "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("render: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "rendered target haproxy (13 objects)") {
		t.Errorf("render said %q", stdout.String())
	}

	cfg, err := config.Load(seedConfig)
	if err != nil {
		t.Fatal(err)
	}
	want, wantErrors := seedJinja2(t, cfg)
	for name, text := range want {
		got, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if string(got) != text {
			t.Errorf("%s differs from Jinja2's:\n--- jinja2\n%s\n--- weft\n%s", name, text, got)
		}
	}
	var rendered []string
	_ = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, p)
			rendered = append(rendered, filepath.ToSlash(rel))
		}
		return err
	})
	if len(rendered) != len(want) || len(want) != 12 {
		t.Errorf("weft rendered %v, Jinja2 %d files", rendered, len(want))
	}
	var gotErrors []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if e, ok := strings.CutPrefix(l, "resource error: "); ok {
			gotErrors = append(gotErrors, e)
		}
	}
	if !slices.Equal(gotErrors, wantErrors) {
		t.Errorf("registered errors: weft %q, Jinja2 %q", gotErrors, wantErrors)
	}

	stdout.Reset()
	stderr.Reset()
	if err := run([]string{"validate", "--config", seedConfig, out}, &stdout, &stderr); err != nil {
		t.Fatalf("validate: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	for _, kind := range []string{"haproxy: ok", "template: ok"} {
		if !strings.Contains(stdout.String(), kind) {
			t.Errorf("validate said %q, want %q", stdout.String(), kind)
		}
	}
}

// seedJinja2 renders cfg's one target with Python's Jinja2 over the
// objects of seedManifests, indexed as weft indexes them, and returns the
// outputs by bundle path and the registered errors.
func seedJinja2(t *testing.T, cfg *config.Config) (map[string]string, []string) {
	t.Helper()
	snap, err := manifests.Scan(seedManifests)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := offline.Index(cfg, snap.Objects)
	if err != nil {
		t.Fatal(err)
	}
	in := testkit.Jinja2Input{Types: map[string]testkit.Jinja2Store{}, Snippets: map[string]string{}, Paths: map[string]string{}}
	for _, typ := range ix.Types() {
		st := ix.Store(typ)
		s := testkit.Jinja2Store{IndexByCount: len(st.IndexBy()), Objects: []testkit.Jinja2Object{}}
		for _, it := range st.Items() {
			keys, _ := st.Keys(it.ID)
			s.Objects = append(s.Objects, testkit.Jinja2Object{ID: it.ID, Keys: keys, Obj: it.Object()})
		}
		in.Types[typ] = s
	}
	tg := cfg.Targets[config.SeedTarget]
	for name, sn := range tg.TemplateSnippets {
		in.Snippets[name] = sn.Template
	}
	bundlePath := map[string]string{}
	add := func(kind, dir, name, text string) {
		in.Outputs = append(in.Outputs, testkit.Jinja2Output{Kind: kind, Name: name, Text: text})
		in.Paths[kind+"\x00"+name] = path.Join(tg.Base, dir, name)
		bundlePath[name] = path.Join(dir, name)
	}
	add("config", "", "haproxy.cfg", tg.HAProxyConfig.Template)
	for name, m := range tg.Maps {
		add("map", "maps", name, m.Template)
	}
	for name, f := range tg.Files {
		add("file", "files", name, f.Template)
	}
	outputs, errs := testkit.Jinja2Render(t, in)
	byPath := map[string]string{}
	for name, text := range outputs {
		byPath[bundlePath[name]] = text
	}
	var lines []string
	for _, l := range strings.Split(errs, "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return byPath, lines
}

// TestSeedConfigUp: `weft up` runs the seed's configuration as written:
// its implied Kubernetes source (the API server of $KUBECONFIG) feeds the
// seed's objects to its one target, which renders what `weft render`
// renders from the same objects (the same bundle hash), is accepted by
// the validator's kinds (haproxy -c included) and is delivered to the
// Dataplane API of the ready Pod that pod_selector picks.
func TestSeedConfigUp(t *testing.T) {
	testkit.HAProxy(t)
	k := kubetest.Start(t)
	ctx := context.Background()
	snap, err := manifests.Scan(seedManifests)
	if err != nil || len(snap.Errors) > 0 {
		t.Fatalf("%v %v", err, snap.Errors)
	}
	made := map[string]bool{}
	for _, o := range snap.Objects {
		if !made[o.Namespace] {
			made[o.Namespace] = true
			ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": o.Namespace}}}
			if _, err := k.Client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		gvr := map[string]schema.GroupVersionResource{
			"Ingress":       {Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
			"Service":       {Version: "v1", Resource: "services"},
			"EndpointSlice": {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
		}[o.Kind]
		body := &unstructured.Unstructured{Object: o.Body}
		body.SetUID("")
		body.SetResourceVersion("")
		body.SetManagedFields(nil)
		if _, err := k.Client.Resource(gvr).Namespace(o.Namespace).Create(ctx, body, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s/%s: %v", o.Kind, o.Namespace, o.Name, err)
		}
	}

	// One HAProxy Pod as pod_selector picks it, ready at a loopback
	// address whose port 5555 a Dataplane API double serves.
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250), 1+rand.IntN(250))
	api := dataplanetest.New(t, dataplanetest.Options{User: "admin", Password: "s3cret", Addr: ip + ":5555"})
	kit := newPodKit(t, k.Clientset)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "haproxy-0", Labels: map[string]string{"app": "haproxy", "component": "loadbalancer"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "haproxy", Image: "haproxytech/haproxy-debian:2.6"}}},
	}
	if _, err := kit.pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kit.run("haproxy-0", ip, true, false)

	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := run([]string{"render", "--config", seedConfig, "--resources", seedManifests, "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("render: %v\n%s", err, stderr.String())
	}
	_, hash, ok := strings.Cut(strings.TrimSpace(stdout.String()), ", bundle ")
	if !ok {
		t.Fatalf("render said %q", stdout.String())
	}

	cfgPath, err := filepath.Abs(seedConfig)
	if err != nil {
		t.Fatal(err)
	}
	w := startWeftEnv(t, []string{"KUBECONFIG=" + k.Kubeconfig, "WEFT_LISTEN=127.0.0.1:0", config.SeedUserEnv + "=admin", config.SeedPasswordEnv + "=s3cret"},
		"up", "--config", cfgPath, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--watch-config=false")
	testkit.Eventually(t, 2*time.Minute, func() error {
		if exited, err := w.exited(); exited {
			t.Fatalf("weft up exited: %v\n%s", err, w.out)
		}
		for _, m := range []string{"rendered", "bundle accepted"} {
			rec, ok := w.logged(m)
			if !ok {
				return fmt.Errorf("no %q yet", m)
			}
			if got := fmt.Sprint(rec["hash"]); got != hash {
				t.Fatalf("%s bundle %s, weft render's %s\n%s", m, got, hash, w.out)
			}
		}
		return nil
	})
	// The Pod's Dataplane API gets the configuration weft render made.
	rendered, err := os.ReadFile(filepath.Join(out, "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := dataplanetest.Normalize(string(rendered))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Minute, func() error {
		if got, _ := api.Config(); got != want {
			return fmt.Errorf("the Pod's Dataplane API has\n%s", got)
		}
		return nil
	})
	// logging.verbose 2 is debug; validation's Dataplane address is named
	// as not used.
	if _, ok := w.logged("validation.dataplane_host/dataplane_port (localhost:5555) are not used"); !ok {
		t.Errorf("the unused validation section is not named:\n%s", w.out)
	}
	if rec, ok := w.logged("settings"); !ok || rec["level"] != "DEBUG" || rec["log_level"] != "debug" {
		t.Errorf("logging.verbose: 2 did not log at debug: %v", rec)
	}
	if err := w.interrupt(t); err != nil {
		t.Fatal(err)
	}
}
