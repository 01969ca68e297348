package haproxycheck

import "strings"

// HugePages is the glibc tunable haproxy runs with unless the environment
// sets it: glibc's malloc marks its heap for transparent huge pages
// (madvise), which the kernel's default THP mode ("madvise") then backs
// with 2 MB pages. haproxy allocates its servers' structures as it parses,
// so `haproxy -c` on a large configuration spends most of its time taking
// 4 KB page faults: at 80,000 server lines (10,000 Ingresses of the
// ingress library) 103,000 faults and 1.7 s, with this tunable 1,300
// faults and 0.3 s (BENCHMARKS.md, "Validation overhead"). Where the kernel
// has THP off, or the libc is not glibc (2.35 or later), it changes nothing.
const HugePages = "glibc.malloc.hugetlb=1"

// tunablesVar is the environment variable glibc reads its tunables from:
// name=value pairs separated by colons.
const tunablesVar = "GLIBC_TUNABLES"

// Environ returns env (in os.Environ's form) for an haproxy process: with
// HugePages added to GLIBC_TUNABLES, unless that already sets
// glibc.malloc.hugetlb (so GLIBC_TUNABLES=glibc.malloc.hugetlb=0 turns it
// off). env is not modified.
func Environ(env []string) []string {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		value, ok := strings.CutPrefix(kv, tunablesVar+"=")
		if !ok {
			out = append(out, kv)
			continue
		}
		if found {
			// A later duplicate: glibc reads the first one only.
			continue
		}
		found = true
		out = append(out, tunablesVar+"="+withHugePages(value))
	}
	if !found {
		out = append(out, tunablesVar+"="+HugePages)
	}
	return out
}

// withHugePages adds HugePages to a GLIBC_TUNABLES value that does not set
// glibc.malloc.hugetlb already.
func withHugePages(value string) string {
	name, _, _ := strings.Cut(HugePages, "=")
	for t := range strings.SplitSeq(value, ":") {
		if n, _, _ := strings.Cut(t, "="); n == name {
			return value
		}
	}
	if value == "" {
		return HugePages
	}
	return value + ":" + HugePages
}
