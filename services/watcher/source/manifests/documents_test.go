package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// docs joins YAML documents into one file's content.
func docs(d ...string) string { return strings.Join(d, "---\n") }

// TestEditParsesOnlyChangedDocuments: a file read again for a change
// reports the objects of the documents whose bytes changed since its last
// good read, and only those; the others are known unchanged. Each step
// writes files (an empty content removes the file) and lists every call
// the sink gets for it, in any order.
func TestEditParsesOnlyChangedDocuments(t *testing.T) {
	many := make([]string, 50)
	for i := range many {
		many[i] = configMap(fmt.Sprintf("m%02d", i), "1")
	}
	edited := slices.Clone(many)
	edited[17] = configMap("m17", "2")
	moved := append([]string{edited[49]}, edited[:49]...)
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {value: 1}\n"
	other := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n"

	type step struct {
		name  string
		write map[string]string
		want  []string
	}
	steps := []step{
		{"one document of fifty changed", map[string]string{"a.yaml": docs(edited...)},
			[]string{"upsert configmaps/shop/m17=2"}},
		{"documents moved, none changed", map[string]string{"a.yaml": docs(moved...)}, nil},
		{"a document and an unwatched one added", map[string]string{"a.yaml": docs(append(slices.Clone(moved), svc, other)...)},
			[]string{"upsert services/shop/web=1"}},
		{"a document removed", map[string]string{"a.yaml": docs(append(slices.Clone(moved[1:]), svc, other)...)},
			[]string{"delete configmaps/shop/m49"}},
		// The change of m03 is taken with the file, when the file parses
		// again: kept documents are those of the last good read.
		{"a change beside a broken document", map[string]string{"a.yaml": docs(append(slices.Clone(moved[1:4]), configMap("m03", "3"), "kind: [\n")...)}, nil},
		{"the broken document fixed", map[string]string{"a.yaml": docs(append(slices.Clone(moved[1:4]), configMap("m03", "3"))...)},
			// The file keeps m00..m02 and the edited m03; m04..m48
			// and the Service are gone.
			deletes(4, 48, "m03=3", "services/shop/web")},
		// A copy of m00 in b.yaml is a duplicate while a.yaml holds it;
		// once a.yaml's copy goes, b.yaml's stands: b.yaml is read again
		// whole for it (the source holds no object), so its other object
		// is reported again too (the store skips it: same content).
		{"a duplicate in another file", map[string]string{"b.yaml": docs(configMap("m00", "b"), configMap("b1", "1"))},
			[]string{"upsert configmaps/shop/b1=1"}},
		{"the first copy removed", map[string]string{"a.yaml": docs(moved[2:4]...)},
			[]string{"upsert configmaps/shop/m00=b", "delete configmaps/shop/m03", "upsert configmaps/shop/b1=1"}},
	}

	dir := newRoot(t)
	writeFile(t, filepath.Join(dir, "a.yaml"), docs(many...))
	var reads readCounter
	sink := &recordingSink{}
	startSource(t, dir, sink, &reads)
	n := sink.waitCall(t, 0, "replace services []")
	for _, st := range steps {
		before := map[string]int{}
		for name := range st.write {
			before[name] = reads.get(name)
		}
		for name, content := range st.write {
			writeFile(t, filepath.Join(dir, name+".tmp~"), content)
			must(t, os.Rename(filepath.Join(dir, name+".tmp~"), filepath.Join(dir, name)))
		}
		for name := range st.write {
			deadline := time.Now().Add(waitTimeout)
			for reads.get(name) == before[name] && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		got := settle(sink, n, len(st.want))
		n += len(got)
		want := slices.Clone(st.want)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: calls\n%q\nwant\n%q", st.name, got, want)
		}
	}
}

// deletes lists the deletes of the ConfigMaps m<first> to m<last>, the
// upsert of the ConfigMap value up and the delete of gone.
func deletes(first, last int, up, gone string) []string {
	var out []string
	for i := first; i <= last; i++ {
		out = append(out, fmt.Sprintf("delete configmaps/shop/m%02d", i))
	}
	return append(out, "upsert configmaps/shop/"+up, "delete "+gone)
}

// settle waits for at least want calls after the first n, then until no
// call comes for a while, and returns the calls after n.
func settle(sink *recordingSink, n, want int) []string {
	deadline := time.Now().Add(waitTimeout)
	for len(sink.since(n)) < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		got := len(sink.since(n))
		time.Sleep(200 * time.Millisecond)
		if len(sink.since(n)) == got {
			return sink.since(n)
		}
	}
}
