package haproxycheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

// benchSizes are the backends of the bundles benchmarked, four servers
// each: 20,000 is 80,000 server lines, as many as the ingress library
// writes for 10,000 Ingresses.
var benchSizes = []int{200, 2000, 20000}

// benchBundle is testkit.HAProxyBundle with n backends.
func benchBundle(n int) []File {
	var out []File
	for _, f := range testkit.HAProxyBundle(n) {
		out = append(out, File{Path: f.Path, Content: f.Content})
	}
	return out
}

// BenchmarkCheck is the package's full cost: validate, lay out, rewrite, run
// haproxy -c (with glibc's malloc on huge pages, as Check runs it), parse
// and clean up. Compare with BenchmarkBareHaproxyC.
func BenchmarkCheck(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("backends-%d", n), func(b *testing.B) {
			c, root := newTestChecker(b)
			files := benchBundle(n)
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
		})
	}
}

// BenchmarkBareHaproxyC runs plain haproxy -c -f on the same bundles, laid
// out on disk once beforehand, with glibc's malloc on 4 KB pages (plain)
// and on huge pages (Environ).
func BenchmarkBareHaproxyC(b *testing.B) {
	for _, n := range benchSizes {
		bnd, err := prepare(benchBundle(n), testMain, testBase)
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		if err := bnd.layout(dir); err != nil {
			b.Fatal(err)
		}
		for _, env := range []struct {
			name string
			env  []string
		}{
			{"plain", append(os.Environ(), "GLIBC_TUNABLES=glibc.malloc.hugetlb=0")},
			{"hugepages", Environ(os.Environ())},
		} {
			b.Run(fmt.Sprintf("backends-%d/%s", n, env.name), func(b *testing.B) {
				c, _ := newTestChecker(b)
				run := func() {
					cmd := exec.Command(c.Binary(), "-c", "-f", dir+"/"+testMain)
					cmd.Dir, cmd.Env = dir, env.env
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("haproxy -c: %v\n%s", err, out)
					}
				}
				run()
				b.ReportAllocs()
				for b.Loop() {
					run()
				}
			})
		}
	}
}
