package msg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

func bigConfig(n, changed int) []byte {
	var cfg []byte
	for i := range n {
		addr := fmt.Sprintf("10.0.%d.%d", i/250, i%250)
		if i == changed {
			addr = "192.0.2.9"
		}
		cfg = fmt.Appendf(cfg, "backend be_%d\n  server s1 %s:80 check\n", i, addr)
	}
	return cfg
}

func bundleOf(t *testing.T, files []BundleFile) Bundle {
	t.Helper()
	b, err := NewBundle("web", "/etc/haproxy", "haproxy.cfg", files)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A bundle's hash is the same whether its files were cut by a Cutter
// (against the bundle before), cut by a store, or from nothing; a file
// whose content is replaced after its cut is hashed by its new content.
func TestHashOfCutFiles(t *testing.T) {
	var cutter Cutter
	for _, changed := range []int{-1, 10, 2999, 0} {
		files := []BundleFile{
			{Path: "haproxy.cfg", Kind: FileConfig, Content: bigConfig(3000, changed)},
			{Path: "maps/hosts.map", Kind: FileMap, Content: []byte("a.example.com be_a\n")},
			{Path: "files/empty.http", Kind: FileFile},
		}
		plain := bundleOf(t, files)
		cut := bundleOf(t, cutter.Cut(files))
		if cut.Hash != plain.Hash {
			t.Fatalf("change %d: cut by a Cutter, hash %s; from nothing, %s", changed, cut.Hash, plain.Hash)
		}
		if !slices.Equal(cut.Refs(), plain.Refs()) {
			t.Fatalf("change %d: refs %v, from nothing %v", changed, cut.Refs(), plain.Refs())
		}
		if plain.Hash == plain.wholeContentHash() {
			t.Fatal("the hash is the whole content's")
		}
		replaced := cut
		replaced.Files = slices.Clone(cut.Files)
		replaced.Files[0].Content = bigConfig(3000, 1234)
		if err := replaced.Consistent(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("change %d: content replaced after its cut: %v, want ErrInvalid", changed, err)
		}
	}
}

// A bundle an older weft made (its hash over the whole content) is
// consistent, and loads from a store; one whose hash is neither is not.
func TestBundleHashedWhole(t *testing.T) {
	files := []BundleFile{
		{Path: "haproxy.cfg", Kind: FileConfig, Content: bigConfig(2000, -1)},
		{Path: "maps/hosts.map", Kind: FileMap, Content: []byte("a.example.com be_a\n")},
	}
	old := bundleOf(t, files)
	old.Hash = old.wholeContentHash()
	if err := old.Consistent(); err != nil {
		t.Fatalf("hashed whole: %v", err)
	}
	js := provisionedJS(t)
	ctx := context.Background()
	if err := NewBundleStore(js).PutBundle(ctx, "", old); err != nil {
		t.Fatal(err)
	}
	got, err := NewBundleStore(js).LoadBundle(ctx, old.Hash)
	if err != nil {
		t.Fatalf("load a bundle hashed whole: %v", err)
	}
	if got.Hash != old.Hash || len(got.Files) != 2 {
		t.Fatalf("loaded %s with %d files", got.Hash, len(got.Files))
	}
	wrong := old
	wrong.Hash = wrong.Hash[1:] + "0"
	if err := wrong.Consistent(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("neither hash: %v, want ErrInvalid", err)
	}
}
