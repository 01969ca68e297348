package files

import (
	"fmt"
	"strings"
	"testing"
)

// benchBundle is a 50-file bundle of a few KiB per file, in a few directories.
func benchBundle() []File {
	files := make([]File, 50)
	for i := range files {
		files[i] = File{
			Path:    fmt.Sprintf("dir%d/file%02d.conf", i%5, i),
			Content: []byte(strings.Repeat(fmt.Sprintf("line %d of file %d\n", i, i), 200)),
		}
	}
	return files
}

// BenchmarkApplyUnchanged measures the compare: nothing differs, so nothing
// is staged and no command runs.
func BenchmarkApplyUnchanged(b *testing.B) {
	d, err := New(Options{Dest: b.TempDir(), ReloadCmd: "true", CheckCmd: "true"})
	if err != nil {
		b.Fatal(err)
	}
	files := benchBundle()
	if _, err := d.Apply(b.Context(), files); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := d.Apply(b.Context(), files)
		if err != nil {
			b.Fatal(err)
		}
		if res.Unchanged != len(files) {
			b.Fatalf("Unchanged = %d", res.Unchanged)
		}
	}
}

// BenchmarkApplyOneChanged measures a delivery of one changed file of 50:
// the compare, staging, one rename and the manifest. Without a check
// command only the changed file is staged; with one ("true", beside it in
// the same run) the complete bundle is, for the command to see, and the
// command runs.
func BenchmarkApplyOneChanged(b *testing.B) {
	for _, bc := range []struct{ name, check string }{{"no-check", ""}, {"check", "true"}} {
		b.Run(bc.name, func(b *testing.B) {
			d, err := New(Options{Dest: b.TempDir(), CheckCmd: bc.check})
			if err != nil {
				b.Fatal(err)
			}
			files := benchBundle()
			if _, err := d.Apply(b.Context(), files); err != nil {
				b.Fatal(err)
			}
			variants := [2][]byte{[]byte("variant a\n"), []byte("variant b\n")}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				files[7].Content = variants[i%2]
				i++
				res, err := d.Apply(b.Context(), files)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Written) != 1 {
					b.Fatalf("Written = %q", res.Written)
				}
			}
		})
	}
}
