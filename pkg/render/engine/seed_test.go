package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/config/fieldpath"
	"github.com/weftio/weft/pkg/render/index"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

const seedDir = "testdata/seed-example"

// loadSeedConfig loads the seed's configuration, verbatim, through the real
// loader: its one target holds the template sections.
func loadSeedConfig(tb testing.TB) *config.Config {
	tb.Helper()
	cfg, err := config.Load(filepath.Join(seedDir, "config.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	t := cfg.Targets[config.SeedTarget]
	if t.HAProxyConfig.Template == "" || len(t.TemplateSnippets) == 0 || len(t.Maps) == 0 || len(t.Files) == 0 {
		tb.Fatalf("config.yaml is missing parts: %+v", t)
	}
	return cfg
}

// seedSpec turns the seed's target into an engine Spec: haproxy.cfg first,
// then maps and files by name.
func seedSpec(cfg *config.Config) Spec {
	t := cfg.Targets[config.SeedTarget]
	spec := Spec{Snippets: map[string]string{}}
	for name, sn := range t.TemplateSnippets {
		spec.Snippets[name] = sn.Template
	}
	spec.Outputs = append(spec.Outputs, Template{Kind: KindConfig, Name: "haproxy.cfg", Text: t.HAProxyConfig.Template})
	for _, name := range sortedKeys(t.Maps) {
		spec.Outputs = append(spec.Outputs, Template{Kind: KindMap, Name: name, Text: t.Maps[name].Template})
	}
	for _, name := range sortedKeys(t.Files) {
		spec.Outputs = append(spec.Outputs, Template{Kind: KindFile, Name: name, Text: t.Files[name].Template})
	}
	return spec
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// seedIndex loads testdata/seed-example/resources/<type>.json into an
// index built with the seed's index_by, stripping the ignored fields.
func seedIndex(tb testing.TB, cfg *config.Config) *index.Index {
	tb.Helper()
	var specs []index.Spec
	for _, typ := range sortedKeys(cfg.WatchedResources) {
		specs = append(specs, index.Spec{Type: typ, IndexBy: cfg.WatchedResources[typ].IndexBy})
	}
	ix, err := index.New(specs)
	if err != nil {
		tb.Fatal(err)
	}
	var ignore []fieldpath.Path
	for _, expr := range cfg.WatchedResourcesIgnoreFields {
		p, err := fieldpath.Parse(expr)
		if err != nil {
			tb.Fatal(err)
		}
		ignore = append(ignore, p)
	}
	files, err := filepath.Glob(filepath.Join(seedDir, "resources", "*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no resources: %v", err)
	}
	var rev uint64
	for _, f := range files {
		typ := strings.TrimSuffix(filepath.Base(f), ".json")
		raw, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		for _, item := range list {
			obj, err := index.Decode(item)
			if err != nil {
				tb.Fatalf("%s: %v", f, err)
			}
			for _, p := range ignore {
				p.Delete(obj)
			}
			md := obj["metadata"].(map[string]any)
			rev++
			id := fmt.Sprintf("%s/%s", md["namespace"], md["name"])
			if !ix.Upsert(typ, id, rev, obj) {
				tb.Fatalf("%s: %s %s not stored", f, typ, id)
			}
		}
	}
	return ix
}

func seedPath(kind Kind, name string) (string, error) {
	dirs := map[Kind]string{KindMap: "maps", KindFile: "files", KindCert: "certs"}
	if kind == KindConfig {
		return "/etc/haproxy/" + name, nil
	}
	dir, ok := dirs[kind]
	if !ok {
		return "", fmt.Errorf("no directory for kind %q", kind)
	}
	return "/etc/haproxy/" + dir + "/" + name, nil
}

// goldenName is where a rendered file is kept under golden/, laid out as
// it is below /etc/haproxy.
func goldenName(f File) string {
	p, _ := seedPath(f.Kind, f.Name)
	return strings.TrimPrefix(p, "/etc/haproxy/")
}

func TestSeedExampleGolden(t *testing.T) {
	cfg := loadSeedConfig(t)
	set, err := Compile(seedSpec(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ix := seedIndex(t, cfg)
	if got := ix.Counts(); got["ingresses"] != 3 || got["endpoints"] != 5 || got["services"] != 5 {
		t.Fatalf("unexpected counts %v", got)
	}
	if _, still := ix.Store("ingresses").Items()[0].Object()["metadata"].(map[string]any)["managedFields"]; still {
		t.Fatal("ignored field metadata.managedFields was stored")
	}
	out, err := set.Render(context.Background(), Input{Resources: ix.Stores(), Path: seedPath})
	if err != nil {
		t.Fatal(err)
	}
	if tg := cfg.Targets[config.SeedTarget]; len(out.Files) != 1+len(tg.Maps)+len(tg.Files) {
		t.Fatalf("rendered %d files", len(out.Files))
	}
	golden := filepath.Join(seedDir, "golden")
	registered := out.Errors
	if registered == nil {
		registered = []RegisteredError{}
	}
	errorsJSON, err := json.MarshalIndent(registered, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"errors.json": append(errorsJSON, '\n')}
	for _, f := range out.Files {
		want[goldenName(f)] = f.Content
	}
	if *update {
		if err := os.RemoveAll(golden); err != nil {
			t.Fatal(err)
		}
		for name, content := range want {
			p := filepath.Join(golden, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var onDisk []string
	err = filepath.WalkDir(golden, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(golden, p)
			onDisk = append(onDisk, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != len(want) {
		t.Errorf("golden has %d files %q, render produced %d", len(onDisk), onDisk, len(want))
	}
	for name, got := range want {
		exp, err := os.ReadFile(filepath.Join(golden, name))
		if err != nil {
			t.Errorf("%s: %v (run go test -update)", name, err)
			continue
		}
		if !bytes.Equal(got, exp) {
			t.Errorf("%s differs from golden:\n%s", name, firstDiff(string(exp), string(got)))
		}
	}
}

// firstDiff shows the first differing line of two texts.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			return fmt.Sprintf("line %d:\n want %q\n  got %q", i+1, wl, gl)
		}
	}
	return "(identical lines, different bytes)"
}

// BenchmarkRenderSeedExample renders the seed's example from a freshly
// compiled Set each time (a Set keeps its outputs between renders, so a
// second render of unchanged input would only measure the cache).
func BenchmarkRenderSeedExample(b *testing.B) {
	cfg := loadSeedConfig(b)
	spec := seedSpec(cfg)
	ix := seedIndex(b, cfg)
	in := Input{Resources: ix.Stores(), Path: seedPath}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		set, err := Compile(spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := set.Render(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}
