package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/testkit"
)

// watched is the watched_resources block of README.md: the tests index
// objects exactly as the documentation tells users to declare them.
func watched(t testing.TB) map[string]config.Resource {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(watched_resources:\n.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```yaml block starting with watched_resources:")
	}
	var doc struct {
		WatchedResources map[string]config.Resource `json:"watched_resources"`
	}
	if err := yaml.UnmarshalStrict(m[1], &doc); err != nil {
		t.Fatalf("README watched_resources: %v", err)
	}
	return doc.WatchedResources
}

// object is one Kubernetes object of a fixture.
type object struct {
	typ, ns, name string
	body          map[string]any
}

var (
	docSep  = regexp.MustCompile(`(?m)^---\s*$`)
	comment = regexp.MustCompile(`(?m)^\s*#.*$`)
)

// parseObjects reads a multi-document YAML stream of Kubernetes objects
// and assigns each its watched type.
func parseObjects(t testing.TB, res map[string]config.Resource, data []byte) []object {
	t.Helper()
	var out []object
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(comment.ReplaceAllString(doc, "")) == "" {
			continue
		}
		var body map[string]any
		if err := yaml.Unmarshal([]byte(doc), &body); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		apiVersion, _ := body["apiVersion"].(string)
		kind, _ := body["kind"].(string)
		typ := ""
		for n, r := range res {
			if r.APIVersion == apiVersion && r.Kind == kind {
				typ = n
			}
		}
		if typ == "" {
			t.Fatalf("document %d: no watched type for %s %s", i, apiVersion, kind)
		}
		meta, _ := body["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		out = append(out, object{typ: typ, ns: ns, name: name, body: body})
	}
	return out
}

// newIndex indexes objects as the renderer does (the ids of a source named
// "test").
func newIndex(t testing.TB, res map[string]config.Resource, objs []object) *index.Index {
	t.Helper()
	var specs []index.Spec
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range res {
			if !yield(k) {
				return
			}
		}
	}) {
		specs = append(specs, index.Spec{Type: n, IndexBy: res[n].IndexBy})
	}
	ix, err := index.New(specs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		if !ix.Upsert(o.typ, msg.ResourceKey("test", o.typ, o.ns, o.name), uint64(i+1), roundTrip(t, o.body)) {
			t.Fatalf("upsert %s %s/%s ignored", o.typ, o.ns, o.name)
		}
	}
	return ix
}

// roundTrip gives a body the types encoding/json gives (what the watcher
// stores), via YAML's JSON form.
func roundTrip(t testing.TB, body map[string]any) map[string]any {
	t.Helper()
	b, err := yaml.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := index.Decode(j)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gatewayTarget is a target that uses the gateway library.
func gatewayTarget(base string, opts map[string]string) config.Target {
	return config.Target{Library: "gateway", LibraryOptions: opts, Base: base}
}

// render compiles tc and renders it over ix.
func render(t testing.TB, tc config.Target, ix *index.Index) target.Result {
	t.Helper()
	tg, err := target.Compile("edge", tc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tg.Render(context.Background(), ix.Stores(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// writeBundle writes b's files below dir.
func writeBundle(t testing.TB, dir string, b msg.Bundle) {
	t.Helper()
	for _, f := range b.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// haproxyCheck runs `haproxy -c` on the bundle b laid out in dir, which
// must be the bundle's base; a warning fails the test too.
func haproxyCheck(t testing.TB, dir string, b msg.Bundle) {
	t.Helper()
	if b.Base != dir {
		t.Fatalf("bundle base %q is not the folder %q it is checked in", b.Base, dir)
	}
	writeBundle(t, dir, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testkit.HAProxy(t), "-c", "-f", filepath.Join(dir, target.MainFile))
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\n--- haproxy.cfg ---\n%s", err, out.String(), numbered(fileContent(b, target.MainFile)))
	}
	if strings.Contains(out.String(), "[WARNING]") {
		t.Errorf("haproxy -c warns:\n%s", out.String())
	}
}

func fileContent(b msg.Bundle, p string) string {
	for _, f := range b.Files {
		if f.Path == p {
			return string(f.Content)
		}
	}
	return ""
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}

// freePort returns a TCP port that was free on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
