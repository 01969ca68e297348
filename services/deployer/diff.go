package deployer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/weftio/weft/pkg/msg"
)

// diffBundles is the difference from bundle a (version va) to b (vb), file
// by file in path order: each file added, removed or changed with its
// unified diff (3 lines of context).
func diffBundles(a, b msg.Bundle, va, vb uint64) []msg.FileDiff {
	files := map[string][2]*msg.BundleFile{}
	for i := range a.Files {
		f := files[a.Files[i].Path]
		f[0] = &a.Files[i]
		files[a.Files[i].Path] = f
	}
	for i := range b.Files {
		f := files[b.Files[i].Path]
		f[1] = &b.Files[i]
		files[b.Files[i].Path] = f
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := []msg.FileDiff{}
	for _, p := range paths {
		f := files[p]
		d := msg.FileDiff{Path: p, Change: msg.FileChanged}
		var from, to []string
		fromName, toName := fmt.Sprintf("v%d/%s", va, p), fmt.Sprintf("v%d/%s", vb, p)
		switch {
		case f[0] == nil:
			d.Change, fromName = msg.FileAdded, "/dev/null"
			to = difflib.SplitLines(string(f[1].Content))
		case f[1] == nil:
			d.Change, toName = msg.FileRemoved, "/dev/null"
			from = difflib.SplitLines(string(f[0].Content))
		case string(f[0].Content) == string(f[1].Content):
			continue
		default:
			from, to = difflib.SplitLines(string(f[0].Content)), difflib.SplitLines(string(f[1].Content))
		}
		text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: from, B: to, FromFile: fromName, ToFile: toName, Context: 3})
		if err != nil {
			text = "(no diff: " + err.Error() + ")"
		}
		d.Unified = strings.TrimRight(text, "\n") + "\n"
		out = append(out, d)
	}
	return out
}
