package msg_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite the catalogue table in README.md")

const (
	startMarker = "<!-- catalog:start -->\n"
	endMarker   = "<!-- catalog:end -->"
)

// TestReadmeCatalog keeps the README's table of subjects, streams and buckets
// equal to Catalog. Run with -update-readme to regenerate it.
func TestReadmeCatalog(t *testing.T) {
	const path = "../../README.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i, j := strings.Index(s, startMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q ... %q section", strings.TrimSpace(startMarker), endMarker)
	}
	want := msg.CatalogMarkdown()
	got := s[i+len(startMarker) : j]
	if got == want {
		return
	}
	if *updateReadme {
		if err := os.WriteFile(path, []byte(s[:i+len(startMarker)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("README.md's catalogue differs from pkg/msg; run: go test ./pkg/msg -run TestReadmeCatalog -update-readme\n got:\n%s\nwant:\n%s", got, want)
}

func TestCatalogCoversStreams(t *testing.T) {
	names := map[string]bool{}
	for _, e := range msg.Catalog() {
		names[e.Name] = true
	}
	for _, s := range msg.Streams(1) {
		if !names[s.Name] {
			t.Errorf("stream %s missing from Catalog", s.Name)
		}
	}
	for _, kv := range msg.KeyValues(1) {
		if !names[kv.Bucket] {
			t.Errorf("bucket %s missing from Catalog", kv.Bucket)
		}
	}
	for _, o := range msg.ObjectStores(1) {
		if !names[o.Bucket] {
			t.Errorf("object store %s missing from Catalog", o.Bucket)
		}
	}
}
