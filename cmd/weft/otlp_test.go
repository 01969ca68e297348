package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
)

// tracedDeploy is the quickstart delivered to two instances (a, b), its
// spans exported to an OTLP collector, run one way or another.
type tracedDeploy struct {
	t    *testing.T
	dir  string
	nats string // URL of the NATS server the services use
	c    *testkit.OTLPCollector
	// out is what weft wrote (weft up), or each service process's output.
	out func() string
}

// tracedQuickstart copies the quickstart into a folder of the test,
// delivered to the instances a and b.
func tracedQuickstart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	p := filepath.Join(dir, "weft.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	const dest = "      dest: out\n"
	if !strings.Contains(string(data), dest) {
		t.Fatalf("the quickstart's weft.yaml has no %q", dest)
	}
	y := strings.Replace(string(data), dest, dest+"      instances: [{name: a, dest: out/a}, {name: b, dest: out/b}]\n", 1)
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// otlpEnv sets the variables that point weft at c over protocol, for
// the processes the test starts; a short batch delay makes spans leave
// soon.
func otlpEnv(t *testing.T, c *testkit.OTLPCollector, protocol string, more ...string) {
	t.Helper()
	set := append([]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT", c.Endpoint(protocol),
		"OTEL_EXPORTER_OTLP_PROTOCOL", protocol,
		"OTEL_BSP_SCHEDULE_DELAY", "100",
		"OTEL_TRACES_EXPORTER", "",
		"OTEL_SERVICE_NAME", "",
		"OTEL_RESOURCE_ATTRIBUTES", "",
		"OTEL_TRACES_SAMPLER", "",
	}, more...)
	for i := 0; i < len(set); i += 2 {
		t.Setenv(set[i], set[i+1])
	}
}

// upTraced runs `weft up` as a process of its own on the quickstart.
func upTraced(t *testing.T, c *testkit.OTLPCollector) (*tracedDeploy, *weftProcess) {
	t.Helper()
	d := &tracedDeploy{t: t, dir: tracedQuickstart(t), c: c}
	addr := reserveAddr(t)
	d.nats = "nats://" + addr
	w := startWeft(t, "up", "--config", filepath.Join(d.dir, "weft.yaml"), "--nats-listen", addr, "--listen", "127.0.0.1:0")
	d.out = w.out.String
	return d, w
}

// servicesTraced runs each service as a process of its own (its
// weft-<service> binary) on an embedded NATS server of the test: the
// trace crosses processes through NATS headers only.
func servicesTraced(t *testing.T, c *testkit.OTLPCollector) *tracedDeploy {
	t.Helper()
	d := &tracedDeploy{t: t, dir: tracedQuickstart(t), c: c}
	d.nats = testkit.NATS(t).URL
	var procs []*testkit.Process
	for _, sv := range []string{"watcher", "renderer", "validator", "deployer"} {
		bin := testkit.GoBuild(t, "github.com/weftio/weft/services/"+sv+"/cmd/weft-"+sv)
		procs = append(procs, testkit.StartProcess(t, bin, "--config", filepath.Join(d.dir, "weft.yaml"), "--nats-url", d.nats, "--listen", "127.0.0.1:0"))
	}
	d.out = func() string {
		var b strings.Builder
		for _, p := range procs {
			b.WriteString(p.Output())
		}
		return b.String()
	}
	return d
}

func reserveAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// deployed waits until both instances' haproxy.cfg hold want.
func (d *tracedDeploy) deployed(want string) {
	d.t.Helper()
	testkit.Eventually(d.t, 3*time.Minute, func() error {
		for _, inst := range []string{"a", "b"} {
			data, _ := os.ReadFile(filepath.Join(d.dir, "out", inst, "haproxy.cfg"))
			if !strings.Contains(string(data), want) {
				return fmt.Errorf("instance %s has no %q yet", inst, want)
			}
		}
		return nil
	})
}

// change edits the endpoints, waits for both instances to have the edit,
// and returns the trace id of the change message it made.
func (d *tracedDeploy) change(from, to string) string {
	d.t.Helper()
	ctx := context.Background()
	nc, err := nats.Connect(d.nats)
	if err != nil {
		d.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		d.t.Fatal(err)
	}
	subject := msg.ChangeSubject("manifests", "endpoints")
	last := func() *jetstream.RawStreamMsg {
		st, err := js.Stream(ctx, msg.StreamChanges)
		if err != nil {
			return nil
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return nil
		}
		return m
	}
	var before uint64
	if m := last(); m != nil {
		before = m.Sequence
	}
	p := filepath.Join(d.dir, "manifests", "endpoints.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		d.t.Fatal(err)
	}
	if !strings.Contains(string(data), from) {
		d.t.Fatalf("endpoints.yaml has no %q", from)
	}
	if err := os.WriteFile(p+".tmp~", []byte(strings.Replace(string(data), from, to, 1)), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(p+".tmp~", p); err != nil {
		d.t.Fatal(err)
	}
	d.deployed(strings.Trim(to, `"`) + ":8080")
	var tp string
	testkit.Eventually(d.t, time.Minute, func() error {
		m := last()
		if m == nil || m.Sequence <= before {
			return errors.New("no change message for the edit")
		}
		tp = m.Header.Get(msg.HeaderTraceParent)
		return nil
	})
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		d.t.Fatalf("the change message's traceparent is %q", tp)
	}
	return parts[1]
}

// stage is a span the trace of a change must hold, made by service, and
// the stage whose span must be its ancestor.
type stage struct {
	name, service, after string
	attr                 string // a value of its messaging.destination.name, when several spans share the name
}

// changeStages are the stages of one change of the quickstart delivered
// to instances a and b.
var changeStages = []stage{
	{name: "watcher relay", service: "weft-watcher"},
	{name: "renderer changes", service: "weft-renderer", after: "watcher relay"},
	{name: "render quickstart", service: "weft-renderer", after: "renderer changes"},
	{name: "validator renders", service: "weft-validator", after: "render quickstart"},
	{name: "validator validate-haproxy", service: "weft-validator", after: "validator renders"},
	{name: "validator validate-template", service: "weft-validator", after: "validator renders"},
	// Every kind a validator serves answers every request, not only
	// those the target expects.
	{name: "validator validate-syntax", service: "weft-validator", after: "validator renders"},
	{name: "validator validate-policy", service: "weft-validator", after: "validator renders"},
	{name: "deployer verdicts", service: "weft-deployer", after: "validator renders"},
	{name: "deployer orders", service: "weft-deployer", after: "deployer verdicts", attr: msg.DeploySubject("quickstart", "a")},
	{name: "deployer orders", service: "weft-deployer", after: "deployer verdicts", attr: msg.DeploySubject("quickstart", "b")},
}

// traceOfChange waits until the collector holds the whole trace id: one
// root, made by the watcher; every other span's parent received; each
// stage's span there, of the right service, below the stage before it.
func (d *tracedDeploy) traceOfChange(id string) {
	d.t.Helper()
	if err := d.wholeTrace(id, 2*time.Minute); err != nil {
		d.t.Fatal(err)
	}
}

// wholeTrace waits up to timeout for the whole trace id, and says what it
// lacks if it does not come.
func (d *tracedDeploy) wholeTrace(id string, timeout time.Duration) error {
	var problem error
	deadline := time.Now().Add(timeout)
	for {
		problem = checkTrace(d.c.Trace(id), changeStages)
		if problem == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if problem != nil {
		return fmt.Errorf("trace %s of the change: %w\nreceived:\n%s", id, problem, describe(d.c.Trace(id)))
	}
	return nil
}

// checkTrace says what spans lacks to be one change's whole trace. A
// stage may have several spans (a message handled again after a retry):
// each must be of the stage's service and below a span of the stage
// before it.
func checkTrace(spans []testkit.OTLPSpan, stages []stage) error {
	byID := map[string]testkit.OTLPSpan{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	var roots []string
	var errs []error
	for _, s := range spans {
		switch {
		case s.ParentID == "":
			roots = append(roots, s.Name+" ("+s.Service+")")
		case byID[s.ParentID].SpanID == "":
			errs = append(errs, fmt.Errorf("the parent of %q (%s) is not in the trace", s.Name, s.Service))
		}
	}
	if len(roots) != 1 || !strings.HasPrefix(roots[0], "watcher ") || !strings.HasSuffix(roots[0], "(weft-watcher)") {
		errs = append(errs, fmt.Errorf("roots %q, want one: the watcher's span of the change", roots))
	}
	of := func(name, attr string) []testkit.OTLPSpan {
		var out []testkit.OTLPSpan
		for _, s := range spans {
			if s.Name == name && (attr == "" || s.Attrs["messaging.destination.name"] == attr) {
				out = append(out, s)
			}
		}
		return out
	}
	for _, st := range stages {
		mine := of(st.name, st.attr)
		if len(mine) == 0 {
			errs = append(errs, fmt.Errorf("no span %q %s", st.name, st.attr))
		}
		for _, s := range mine {
			if s.Service != st.service {
				errs = append(errs, fmt.Errorf("span %q has service.name %q, want %q", st.name, s.Service, st.service))
			}
			if st.after == "" {
				continue
			}
			if !slices.ContainsFunc(of(st.after, ""), func(a testkit.OTLPSpan) bool { return ancestor(byID, s, a.SpanID) }) {
				errs = append(errs, fmt.Errorf("span %q %s (%s) is not below a span %q", st.name, st.attr, s.SpanID, st.after))
			}
		}
	}
	return errors.Join(errs...)
}

// spansNamed returns the spans called name.
func spansNamed(spans []testkit.OTLPSpan, name string) []testkit.OTLPSpan {
	return slices.DeleteFunc(slices.Clone(spans), func(s testkit.OTLPSpan) bool { return s.Name != name })
}

// ancestor reports whether the span id is s's parent, or its parent's, ...
func ancestor(byID map[string]testkit.OTLPSpan, s testkit.OTLPSpan, id string) bool {
	for seen := 0; s.ParentID != "" && seen < len(byID); seen++ {
		if s.ParentID == id {
			return true
		}
		s = byID[s.ParentID]
	}
	return false
}

func describe(spans []testkit.OTLPSpan) string {
	var lines []string
	for _, s := range spans {
		lines = append(lines, fmt.Sprintf("  %s %s <- %s  %q (%s) %s", s.TraceID[:8], s.SpanID, s.ParentID, s.Name, s.Service, s.Attrs["messaging.destination.name"]))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestTraceOfAChangeReachesTheCollector makes one change and finds its
// whole trace at a real OTLP collector: the watcher's span of the change
// its only root; the render, every validator kind and each instance's
// deploy below it, each span under its own service's name; with weft up
// (every service in one process) over each protocol, and with each
// service a process of its own, where only NATS headers carry the trace.
func TestTraceOfAChangeReachesTheCollector(t *testing.T) {
	testkit.HAProxy(t)
	cases := []struct {
		name, protocol string
		run            func(*testing.T, *testkit.OTLPCollector) *tracedDeploy
	}{
		{"weft up/grpc", telemetry.ProtocolGRPC, func(t *testing.T, c *testkit.OTLPCollector) *tracedDeploy {
			d, _ := upTraced(t, c)
			return d
		}},
		{"weft up/http", telemetry.ProtocolHTTP, func(t *testing.T, c *testkit.OTLPCollector) *tracedDeploy {
			d, _ := upTraced(t, c)
			return d
		}},
		{"a process per service/grpc", telemetry.ProtocolGRPC, servicesTraced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testkit.StartOTLPCollector(t)
			otlpEnv(t, c, tc.protocol)
			d := tc.run(t, c)
			d.deployed("server web-2 127.0.0.2:8080")
			// The first deploy's spans are in before the change.
			testkit.Eventually(t, time.Minute, func() error {
				if n := len(spansNamed(c.Spans(), "deployer orders")); n < 2 {
					return fmt.Errorf("%d spans of the first deploy's orders", n)
				}
				return nil
			})
			before := len(c.Spans())
			earlier := map[string]bool{}
			for _, s := range c.Spans()[:before] {
				earlier[s.TraceID] = true
			}
			id := d.change(`"127.0.0.2"`, `"127.0.0.8"`)
			d.traceOfChange(id)
			// A stage that began a trace of its own would leave the
			// change's trace whole and its own span outside it. A late
			// span of the first deploy's trace (its whole check's verdict,
			// say) belongs to that trace and is not the change's.
			for _, s := range c.Spans()[before:] {
				if s.TraceID != id && !earlier[s.TraceID] && slices.ContainsFunc(changeStages, func(st stage) bool { return st.name == s.Name }) {
					t.Errorf("span %q (%s) of the change is in trace %s, not the change's %s", s.Name, s.Service, s.TraceID, id)
				}
			}
			t.Logf("trace %s:\n%s", id, describe(c.Trace(id)))
			for _, s := range d.c.Spans() {
				if s.Protocol != tc.protocol {
					t.Fatalf("span %q came over %s", s.Name, s.Protocol)
				}
			}
			if t.Failed() {
				t.Logf("weft's output:\n%s", d.out())
			}
		})
	}
}

// TestTracesArriveOnceTheCollectorIsUp starts weft up with its collector
// down: weft runs, delivers and logs the export error; once the
// collector is up, the whole trace of a later change arrives.
func TestTracesArriveOnceTheCollectorIsUp(t *testing.T) {
	testkit.HAProxy(t)
	c := testkit.NewOTLPCollector(t)
	otlpEnv(t, c, telemetry.ProtocolGRPC)
	d, w := upTraced(t, c)
	d.deployed("server web-2 127.0.0.2:8080")
	d.change(`"127.0.0.2"`, `"127.0.0.8"`)
	testkit.Eventually(t, time.Minute, func() error {
		if _, ok := w.logged("tracing: OpenTelemetry error"); !ok {
			return errors.New("no export error logged")
		}
		return nil
	})
	if n := c.Requests(); n != 0 {
		t.Fatalf("a collector that is down received %d requests", n)
	}
	c.Start()
	// The exporter finds the collector again within seconds (its
	// reconnect delay); spans ended before that may be lost after the
	// export's retries, so changes are made until one's whole trace
	// arrives, and then the next one's must arrive whole too.
	addr := "127.0.0.8"
	next := func(i int) string {
		from := addr
		addr = fmt.Sprintf("127.0.0.%d", 10+i)
		return d.change(`"`+from+`"`, `"`+addr+`"`)
	}
	var lost []error
	for i := 0; ; i++ {
		err := d.wholeTrace(next(i), 20*time.Second)
		if err == nil {
			break
		}
		if lost = append(lost, err); len(lost) == 5 {
			t.Fatalf("no change's whole trace arrived after the collector came up: %v", errors.Join(lost...))
		}
	}
	d.traceOfChange(next(len(lost) + 1))
	t.Logf("changes whose traces were incomplete after the collector came up: %d %v", len(lost), lost)
}

// TestTracesOff: with OTEL_TRACES_EXPORTER=none, weft up sends the
// collector nothing, not even when it stops (when the last spans would
// be flushed).
func TestTracesOff(t *testing.T) {
	testkit.HAProxy(t)
	c := testkit.StartOTLPCollector(t)
	otlpEnv(t, c, telemetry.ProtocolHTTP, "OTEL_TRACES_EXPORTER", "none")
	d, w := upTraced(t, c)
	d.deployed("server web-2 127.0.0.2:8080")
	d.change(`"127.0.0.2"`, `"127.0.0.8"`)
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft exited with %v", err)
	}
	if n := c.Requests(); n != 0 {
		t.Fatalf("the collector received %d requests", n)
	}
}

// TestUpRefusesABadTracingSetting: weft up with an unknown OTLP protocol
// stops at once, naming the variable, before it starts anything.
func TestUpRefusesABadTracingSetting(t *testing.T) {
	c := testkit.StartOTLPCollector(t)
	otlpEnv(t, c, "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL", "udp")
	d := &tracedDeploy{t: t, dir: tracedQuickstart(t)}
	w := startWeft(t, "up", "--config", filepath.Join(d.dir, "weft.yaml"), "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	select {
	case err := <-w.done:
		w.done <- err
		if err == nil {
			t.Fatal("weft up exited with status 0")
		}
	case <-time.After(time.Minute):
		t.Fatal("weft up still runs")
	}
	out := w.out.String()
	if !strings.Contains(out, `OTEL_EXPORTER_OTLP_PROTOCOL="udp"`) || !strings.Contains(out, "grpc, http/protobuf") {
		t.Fatalf("weft up said:\n%s\nwant the variable, its value and what it takes", out)
	}
	if _, err := os.Stat(filepath.Join(d.dir, ".weft")); err == nil {
		t.Error("weft up started its NATS server (.weft exists)")
	}
}
