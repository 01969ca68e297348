package main

import (
	"flag"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

// scaleNetnsEnv marks a test process that inScaleNetns started.
const scaleNetnsEnv = "WEFT_SCALE_NETNS"

// kubeAddrsHere reports whether kubeBackends' addresses can be bound here.
func kubeAddrsHere() bool {
	for _, e := range kubeBackends {
		l, err := net.Listen("tcp", net.JoinHostPort(e.addr, "0"))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// inScaleNetns runs tb again, alone, in a new network namespace (unshare
// -n, as root) whose loopback interface also has kubeBackends' addresses,
// unless they can be bound here already: then it returns false and tb
// runs here. Nothing in that namespace reaches any other host. It returns
// true once it ran: the run's failure is tb's, and a benchmark's metrics
// are reported as tb's own.
func inScaleNetns(tb testing.TB) bool {
	tb.Helper()
	if kubeAddrsHere() {
		return false
	}
	if os.Getenv(scaleNetnsEnv) != "" {
		tb.Fatalf("in the test's network namespace, %v cannot be bound", kubeBackends)
	}
	unshare, err := exec.LookPath("unshare")
	testkit.Need(tb, "unshare (util-linux)", err)
	_, err = exec.LookPath("ip")
	testkit.Need(tb, "ip (apt-get install iproute2)", err)
	parts := strings.Split(tb.Name(), "/")
	pattern := "^" + strings.Join(parts, "$/^") + "$"
	b, bench := tb.(*testing.B)
	flags := []string{"-test.run=" + pattern, "-test.count=1", "-test.v"}
	if bench {
		flags = []string{"-test.run=^$", "-test.bench=" + pattern, "-test.count=1", "-test.benchtime=" + flag.Lookup("test.benchtime").Value.String()}
	}
	for _, f := range []string{"scale-heap-profile", "scale-logs", "scale-spans", "scale-cpu-profile", "scale-allocs-profile"} {
		if v := flag.Lookup(f).Value.String(); v != "" {
			flags = append(flags, "-"+f+"="+v)
		}
	}
	script := "ip link set lo up"
	for _, e := range kubeBackends {
		script += " && ip addr add " + e.addr + "/32 dev lo"
	}
	// kube-apiserver advertises the address of the default route's interface;
	// through lo, every address stays in the namespace.
	script += " && ip route add default dev lo"
	cmd := exec.Command(unshare, append([]string{"-n", "sh", "-c", script + ` && exec "$@"`, "sh", os.Args[0]}, flags...)...)
	cmd.Env = append(os.Environ(), scaleNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s in a network namespace of its own: %v\n%s", tb.Name(), err, testkit.LastLines(string(out), 60))
	}
	if !bench {
		if !strings.Contains(string(out), "--- PASS: "+tb.Name()) {
			tb.Fatalf("%s in a network namespace of its own did not pass:\n%s", tb.Name(), testkit.LastLines(string(out), 60))
		}
		return true
	}
	metrics := benchMetrics(string(out), tb.Name())
	if len(metrics) == 0 {
		tb.Fatalf("%s in a network namespace of its own reported nothing:\n%s", tb.Name(), testkit.LastLines(string(out), 60))
	}
	for b.Loop() {
	}
	for unit, v := range metrics {
		b.ReportMetric(v, unit)
	}
	b.ReportMetric(0, "ns/op")
	return true
}

// benchMetrics reads the metrics of benchmark name's result line in out
// (name-GOMAXPROCS, iterations, then value-unit pairs), but ns/op.
func benchMetrics(out, name string) map[string]float64 {
	m := map[string]float64{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != name && !strings.HasPrefix(f[0], name+"-")) {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil && f[i+1] != "ns/op" {
				m[f[i+1]] = v
			}
		}
	}
	return m
}
