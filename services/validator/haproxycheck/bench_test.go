package haproxycheck

import (
	"context"
	"os/exec"
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

const benchBackends = 200

// benchBundle is testkit.HAProxyBundle with benchBackends backends.
func benchBundle() []File {
	var out []File
	for _, f := range testkit.HAProxyBundle(benchBackends) {
		out = append(out, File{Path: f.Path, Content: f.Content})
	}
	return out
}

// BenchmarkCheck is the package's full cost: validate, lay out, rewrite, run
// haproxy -c, parse and clean up. Compare with BenchmarkBareHaproxyC.
func BenchmarkCheck(b *testing.B) {
	c, root := newTestChecker(b)
	files := benchBundle()
	if problems, err := c.Check(context.Background(), files, testMain, testBase); err != nil || problems != nil {
		b.Fatalf("bench bundle must be valid: %v%s", err, dump(problems))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(context.Background(), files, testMain, testBase); err != nil {
			b.Fatal(err)
		}
	}
	assertNoTempDirs(b, root)
}

// BenchmarkBareHaproxyC runs plain haproxy -c -f on the same bundle, laid out
// on disk once beforehand.
func BenchmarkBareHaproxyC(b *testing.B) {
	c, _ := newTestChecker(b)
	bnd, err := prepare(benchBundle(), testMain, testBase)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := bnd.layout(dir); err != nil {
		b.Fatal(err)
	}
	run := func() {
		cmd := exec.Command(c.Binary(), "-c", "-f", dir+"/"+testMain)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("haproxy -c: %v\n%s", err, out)
		}
	}
	run()
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
}
