package soak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

var (
	duration = flag.Duration("duration", 10*time.Second, "how long the changes go on (make soak: 10m)")
	rate     = flag.Int("rate", 100, "endpoint changes a second")
	objects  = flag.Int("objects", 3000, "objects: a third each Ingresses, Services and EndpointSlices (make soak: 10000)")
	files    = flag.Int("files", 30, "manifest files the objects are spread over (make soak: 100)")
	every    = flag.Duration("sample-every", 0, "interval of the samples of size, goroutines and memory (0: a twentieth of -duration)")
	probe    = flag.Duration("probe-every", time.Second, "interval of the probe changes whose latency is measured")
	settle   = flag.Duration("settle", 3*time.Minute, "longest wait for convergence after the last change")
	report   = flag.String("report", "", "also write the report to this file")
	logTo    = flag.String("log", "", "write weft's log to this file (default: in the test's temporary folder)")
	logLevel = flag.String("log-level", "info", "weft's --log-level")
	debounce = flag.Duration("debounce", 100*time.Millisecond, "the target's render.debounce (100ms: the default)")
)

// world is the soak's objects: n Ingresses s<i> (class weft), each with a
// Service and an EndpointSlice of one endpoint, perFile to a file. The
// probe is Ingress 0: its endpoint's port is changed to a new number per
// probe, so the deployed haproxy.cfg tells when the probe arrived.
type world struct {
	n, perFile int
	mu         sync.Mutex
	addr       []byte // last octet of each endpoint's address
	port       []int
	// writing serializes file writes: the writer and the probe both
	// write file 0, through the same temporary name.
	writing sync.Mutex
}

func newWorld(n, nfiles int) *world {
	w := &world{n: n, perFile: (n + nfiles - 1) / nfiles, addr: make([]byte, n), port: make([]int, n)}
	for i := range n {
		w.addr[i], w.port[i] = 2, 8080
	}
	return w
}

func (w *world) files() int { return (w.n + w.perFile - 1) / w.perFile }

func (w *world) name(f int) string { return fmt.Sprintf("objects-%03d.yaml", f) }

func (w *world) manifest(f int) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b bytes.Buffer
	for i := f * w.perFile; i < min(w.n, (f+1)*w.perFile); i++ {
		fmt.Fprintf(&b, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: s%d, namespace: soak}
spec:
  ingressClassName: weft
  rules:
    - host: h%d.soak.test
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: s%d, port: {number: 80}}}}]}
---
apiVersion: v1
kind: Service
metadata: {name: s%d, namespace: soak}
spec: {ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s%d-1, namespace: soak, labels: {kubernetes.io/service-name: s%d}}
addressType: IPv4
ports: [{name: http, port: %d}]
endpoints: [{addresses: ["127.0.0.%d"], conditions: {ready: true}}]
---
`, i, i, i, i, i, i, w.port[i], w.addr[i])
	}
	return b.Bytes()
}

// write writes file f atomically (a rename), as an editor or a sync would.
func (w *world) write(dir string, f int) error {
	w.writing.Lock()
	defer w.writing.Unlock()
	p := filepath.Join(dir, w.name(f))
	if err := os.WriteFile(p+".tmp~", w.manifest(f), 0o644); err != nil {
		return err
	}
	return os.Rename(p+".tmp~", p)
}

// change moves endpoint i between 127.0.0.2 and 127.0.0.3 and writes its
// file.
func (w *world) change(dir string, i int) error {
	w.mu.Lock()
	w.addr[i] = 5 - w.addr[i]
	w.mu.Unlock()
	return w.write(dir, i/w.perFile)
}

// probeTo sets the probe's endpoint port, writes its file and returns the
// server address the deployed haproxy.cfg will then hold.
func (w *world) probeTo(dir string, port int) (string, error) {
	w.mu.Lock()
	w.port[0] = port
	want := fmt.Sprintf("127.0.0.%d:%d", w.addr[0], port)
	w.mu.Unlock()
	return want, w.write(dir, 0)
}

const classYAML = "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: weft}\nspec: {controller: weft.io/ingress}\n"

const configYAML = `sources:
  - {name: manifests, type: manifests, path: manifests}
watched_resources_ignore_fields: [metadata.managedFields]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress, index_by: ["metadata.namespace", "metadata.name"]}
  ingressclasses: {api_version: networking.k8s.io/v1, kind: IngressClass, index_by: ["metadata.name"]}
  services: {api_version: v1, kind: Service, index_by: ["metadata.namespace", "metadata.name"]}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice, index_by: ["metadata.namespace", "metadata.labels['kubernetes.io/service-name']"]}
  secrets: {api_version: v1, kind: Secret, index_by: ["metadata.namespace", "metadata.name"]}
targets:
  soak:
    library: ingress
    library_options: {ingress_class: weft, bind_address: 127.0.0.1, http_port: "18080"}
    validate: {kinds: [haproxy], timeout: 60s}
    deploy: {driver: files, dest: out}
    render: {debounce: %s}
`

// sample is one look at the running weft.
type sample struct {
	at                  time.Duration
	dataBytes           int64
	goroutines          float64
	heapBytes, rssBytes float64
	changes             int
}

// TestSoak runs the soak; its flags say how long and how hard.
func TestSoak(t *testing.T) {
	testkit.HAProxy(t)
	dir := t.TempDir()
	// weft built as this test is: `make soak` runs it without the race
	// detector, so what it measures is weft as shipped; `make test` with
	// it, so weft's packages are compiled once for every test and a race
	// under the soak's load fails it (see the log check below).
	bin := testkit.GoBuild(t, "github.com/weftio/weft/cmd/weft")
	mf := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(mf, 0o755); err != nil {
		t.Fatal(err)
	}
	w := newWorld(*objects/3, *files)
	if err := os.WriteFile(filepath.Join(mf, "class.yaml"), []byte(classYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	for f := range w.files() {
		if err := w.write(mf, f); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "weft.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, configYAML, *debounce), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	metrics := testkit.FreeAddr(t)
	logPath := filepath.Join(dir, "weft.log")
	if *logTo != "" {
		logPath = *logTo
	}
	stop := startWeft(t, bin, logPath, "up", "--config", cfg, "--data-dir", data, "--nats-listen", testkit.FreeAddr(t),
		"--listen", metrics, "--watch-config=false", "--log-level", *logLevel, "--pprof")
	defer stop()

	// The first deploy: every object is in out/haproxy.cfg.
	start := time.Now()
	last := "127.0.0.2:8080\n"
	testkit.Eventually(t, 5*time.Minute, func() error {
		cfg, err := os.ReadFile(filepath.Join(dir, "out", "haproxy.cfg"))
		if err != nil {
			return err
		}
		if want := fmt.Sprintf("backend ing_soak_s%d_s%d_80", w.n-1, w.n-1); !bytes.Contains(cfg, []byte(want)) || !bytes.Contains(cfg, []byte(last)) {
			return fmt.Errorf("haproxy.cfg has no %s yet", want)
		}
		return nil
	})
	t.Logf("first deploy of %d objects after %v", 3*w.n+1, time.Since(start).Round(time.Millisecond))

	interval := *every
	if interval == 0 {
		interval = max(time.Second, *duration/20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var (
		wg      sync.WaitGroup
		changes int
		chMu    sync.Mutex
		werr    error
		samples []sample
		lat     []time.Duration
		probeEr error
	)
	begin := time.Now()
	look := func() {
		chMu.Lock()
		n := changes
		chMu.Unlock()
		s := sample{at: time.Since(begin), dataBytes: treeSize(data), changes: n}
		s.goroutines, s.heapBytes, s.rssBytes = scrape(metrics)
		samples = append(samples, s)
	}
	look()
	wg.Go(func() { // the changes, spread evenly over each second
		tick := time.NewTicker(time.Second / time.Duration(*rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := w.change(mf, 1+rand.IntN(w.n-1)); err != nil {
				werr = err
				return
			}
			chMu.Lock()
			changes++
			chMu.Unlock()
		}
	})
	wg.Go(func() { // the probes
		port := 20000
		for ctx.Err() == nil {
			port++
			at := time.Now()
			want, err := w.probeTo(mf, port)
			if err != nil {
				probeEr = err
				return
			}
			if !served(ctx, filepath.Join(dir, "out", "haproxy.cfg"), "server SRV_1 "+want+"\n") {
				return // the soak ended first
			}
			lat = append(lat, time.Since(at))
			select {
			case <-ctx.Done():
			case <-time.After(*probe):
			}
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				look()
			}
		}
	})
	wg.Wait()
	look()
	if werr != nil || probeEr != nil {
		t.Fatalf("writing the manifests: %v", errors.Join(werr, probeEr))
	}

	// Convergence: out/ is what `weft render` makes of the final manifests.
	ref := filepath.Join(dir, "ref")
	if out, err := exec.Command(bin, "render", "--config", cfg, "--out", ref).CombinedOutput(); err != nil {
		t.Fatalf("weft render: %v\n%s", err, out)
	}
	endAt := time.Now()
	var diff error
	deadline := endAt.Add(*settle)
	for {
		if diff = sameTree(ref, filepath.Join(dir, "out")); diff == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	converged := time.Since(endAt)
	look()
	stop()
	errs := errorLines(t, logPath)

	rep := render(samples, lat, changes, float64(changes)/duration.Seconds(), converged, diff, errs)
	t.Log("\n" + rep)
	if *report != "" {
		if err := os.WriteFile(*report, []byte(rep), 0o644); err != nil {
			t.Error(err)
		}
	}
	if diff != nil {
		t.Errorf("not converged %v after the last change: %v", *settle, diff)
	}
	if len(errs) > 0 {
		t.Errorf("weft logged %d errors, the first: %s", len(errs), errs[0])
	}
	if len(lat) == 0 {
		t.Errorf("no probe change was served during the soak")
	}
}

// startWeft starts bin with args, its output in logPath, and returns a
// stop that sends SIGTERM and waits (idempotent; also run at the end of
// the test).
func startWeft(t *testing.T, bin, logPath string, args ...string) func() {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	t.Cleanup(func() { _ = log.Close() })
	stop, _, _ := testkit.StartCommand(t, cmd, 30*time.Second)
	return stop
}

// served polls path until it contains want, or ctx ends (false).
func served(ctx context.Context, path, want string) bool {
	for {
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(want)) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// treeSize is the bytes of the files under dir.
func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// scrape reads go_goroutines, go_memstats_heap_inuse_bytes and
// process_resident_memory_bytes from weft's /metrics (-1 each when it does
// not answer).
func scrape(addr string) (goroutines, heap, rss float64) {
	goroutines, heap, rss = -1, -1, -1
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "go_goroutines":
			goroutines = v
		case "go_memstats_heap_inuse_bytes":
			heap = v
		case "process_resident_memory_bytes":
			rss = v
		}
	}
	return
}

// sameTree compares every file of ref with the same path under out, and
// reports files of out that ref lacks (but the deploy drivers' own
// dot-files).
func sameTree(ref, out string) error {
	seen := map[string]bool{}
	err := filepath.WalkDir(ref, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(ref, p)
		seen[rel] = true
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s differs from weft render's", rel)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		if strings.HasPrefix(d.Name(), ".") && rel != "." {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && !seen[rel] {
			return fmt.Errorf("%s is deployed but weft render has no such file", rel)
		}
		return nil
	})
}

// errorLines are the lines of weft's log at level ERROR, and the race
// detector's reports (weft built with it).
func errorLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "level=ERROR") || strings.Contains(line, testkit.RaceReport) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// render is the report: the samples as a table, then the probes and the
// end state.
func render(samples []sample, lat []time.Duration, changes int, perSecond float64, converged time.Duration, diff error, errs []string) string {
	var b strings.Builder
	mb := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v/(1<<20))
	}
	fmt.Fprintf(&b, "| at | changes | data folder MB | goroutines | heap MB | RSS MB |\n|---|---|---|---|---|---|\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "| %v | %d | %s | %.0f | %s | %s |\n", s.at.Round(time.Second), s.changes, mb(float64(s.dataBytes)), s.goroutines, mb(s.heapBytes), mb(s.rssBytes))
	}
	fmt.Fprintf(&b, "\n%d endpoint changes (%.0f a second); %d probe changes served", changes, perSecond, len(lat))
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p int) time.Duration { return lat[min(len(lat)-1, len(lat)*p/100)].Round(time.Millisecond) }
		fmt.Fprintf(&b, ": p50 %v, p99 %v, max %v", q(50), q(99), lat[len(lat)-1].Round(time.Millisecond))
	}
	if diff == nil {
		fmt.Fprintf(&b, "\nconverged: out/ is what weft render makes of the final manifests, %v after the last change", converged.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "\nNOT converged after %v: %v", converged.Round(time.Millisecond), diff)
	}
	fmt.Fprintf(&b, "\nerrors logged: %d\n", len(errs))
	return b.String()
}
