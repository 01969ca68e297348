package librarytest

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
)

// Object is one Kubernetes object of a fixture, with its watched type.
type Object struct {
	Type, Namespace, Name string
	Body                  map[string]any
}

var (
	watchedBlock = regexp.MustCompile("(?s)```yaml\n(watched_resources:\n.*?)```")
	docSep       = regexp.MustCompile(`(?m)^---\s*$`)
	comment      = regexp.MustCompile(`(?m)^\s*#.*$`)
)

// Watched is the watched_resources block of the README at readme: the
// tests index objects exactly as the documentation tells users to declare
// them.
func Watched(t testing.TB, readme string) map[string]config.Resource {
	t.Helper()
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	m := watchedBlock.FindSubmatch(text)
	if m == nil {
		t.Fatalf("%s has no ```yaml block starting with watched_resources:", readme)
	}
	var doc struct {
		WatchedResources map[string]config.Resource `json:"watched_resources"`
	}
	if err := yaml.UnmarshalStrict(m[1], &doc); err != nil {
		t.Fatalf("README watched_resources: %v", err)
	}
	return doc.WatchedResources
}

// ParseObjects reads a multi-document YAML stream of Kubernetes objects
// and assigns each its watched type in res.
func ParseObjects(t testing.TB, res map[string]config.Resource, data []byte) []Object {
	t.Helper()
	var out []Object
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
		out = append(out, Object{Type: typ, Namespace: ns, Name: name, Body: body})
	}
	return out
}

// NewIndex indexes objs as the renderer does (the ids of a source named
// "test").
func NewIndex(t testing.TB, res map[string]config.Resource, objs []Object) *index.Index {
	t.Helper()
	var specs []index.Spec
	for _, n := range slices.Sorted(maps.Keys(res)) {
		specs = append(specs, index.Spec{Type: n, IndexBy: res[n].IndexBy})
	}
	ix, err := index.New(specs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		if !ix.Upsert(o.Type, ObjectID(o.Type, o.Namespace, o.Name), uint64(i+1), RoundTrip(t, o.Body)) {
			t.Fatalf("upsert %s %s/%s ignored", o.Type, o.Namespace, o.Name)
		}
	}
	return ix
}

// ObjectID is the index id of an object of a source named "test".
func ObjectID(typ, ns, name string) string { return msg.ResourceKey("test", typ, ns, name) }

// RoundTrip gives a body the types encoding/json gives (what the watcher
// stores), via YAML's JSON form; the result shares nothing with body.
func RoundTrip(t testing.TB, body map[string]any) map[string]any {
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

// CloneObjects is a deep copy of objs, for a test that rewrites them.
func CloneObjects(t testing.TB, objs []Object) []Object {
	t.Helper()
	out := make([]Object, len(objs))
	for i, o := range objs {
		o.Body = RoundTrip(t, o.Body)
		out[i] = o
	}
	return out
}
