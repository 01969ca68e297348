// Package chaos runs weft as its users do, every service as separate
// processes with several replicas on a 3-node NATS cluster with replicated
// streams and buckets, edits a folder of manifests while it kills service
// replicas and NATS nodes, and checks that what the files driver deployed in
// the end is byte for byte what `weft render` makes of the final manifests.
// Each run is recorded: whether it converged and how long after the last
// edit, the dead letters by reason, ERROR log lines by message, and the
// kills and crashes of every process. Every process logs to a file in the
// run folder, which is kept when the run fails.
//
// It is a harness, used from tests (TestChaos for `make chaos`,
// TestChaosShort for the short form); it needs the testing package for the
// NATS cluster of pkg/testkit.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// Mode chooses the faults of a run.
type Mode string

// Modes.
const (
	// NoFaults only edits: the baseline.
	NoFaults Mode = "no-faults"
	// Faults kills a random service replica and a random NATS node
	// periodically (SIGKILL), restarting each after a short pause.
	Faults Mode = "faults"
	// LoseNode loses one NATS node with its store for good a quarter into
	// the edits (and optionally replaces it with a fresh node, as an
	// operator would), and kills service replicas as Faults does.
	LoseNode Mode = "lose-node"
)

// Options of a run.
type Options struct {
	Mode  Mode
	Seed  uint64
	Sites int // each is an Ingress, a Service and an EndpointSlice
	Edits int
	// Duration is how long the edits take, evenly spaced.
	Duration time.Duration
	// ServiceKillEvery and NodeKillEvery are the mean intervals between
	// kills of a service replica and of a NATS node (each +-50%).
	ServiceKillEvery, NodeKillEvery time.Duration
	// ReplaceAfter (LoseNode) replaces the lost node with a fresh one this
	// long after the loss; 0 leaves the cluster with two nodes.
	ReplaceAfter time.Duration
	// Settle bounds the wait for convergence, initially and after the last
	// edit.
	Settle time.Duration
	// Replicas of each service (processes).
	Replicas int
	// Bin holds weft, weft-watcher, weft-renderer, weft-validator and
	// weft-deployer; empty builds them into the run folder.
	Bin string
	// Root is the repository (for the quickstart configuration; the
	// binaries are built by testkit.GoBuild, from the workspace).
	Root string
	// Dir is the run folder; empty makes one in the temp folder. It is
	// deleted after a converged run unless Keep.
	Dir  string
	Keep bool
	// FailoverRounds > 0: after the edits, measure that many times how
	// long a target goes without a deploy when its render lease holder is
	// killed (see failover).
	FailoverRounds int
	// FailoverOf names the service whose replica is killed in a failover
	// round: "renderer" (the render lease holder; the default) or
	// "deployer" (the replica carrying out a deploy order: its check_cmd
	// is made to take a second, and it is killed during it).
	FailoverOf string
}

// check refuses options a run cannot honour.
func (o Options) check() error {
	switch {
	case o.Mode != NoFaults && o.Mode != Faults && o.Mode != LoseNode:
		return fmt.Errorf("chaos: unknown mode %q (want %s, %s or %s)", o.Mode, NoFaults, Faults, LoseNode)
	case o.Sites < 1 || o.Edits < 1 || o.Replicas < 1:
		return fmt.Errorf("chaos: sites (%d), edits (%d) and replicas (%d) must be at least 1", o.Sites, o.Edits, o.Replicas)
	case o.Duration <= 0 || o.Settle <= 0:
		return fmt.Errorf("chaos: duration (%v) and settle (%v) must be positive", o.Duration, o.Settle)
	case o.Mode != NoFaults && o.ServiceKillEvery <= 0:
		return fmt.Errorf("chaos: service-kill-every must be positive in mode %s", o.Mode)
	case o.Mode == Faults && o.NodeKillEvery <= 0:
		return fmt.Errorf("chaos: node-kill-every must be positive in mode %s", o.Mode)
	case o.FailoverOf != "" && o.FailoverOf != "renderer" && o.FailoverOf != "deployer":
		return fmt.Errorf("chaos: failover-of %q: want renderer or deployer", o.FailoverOf)
	case o.Root == "":
		return errors.New("chaos: the repository root is needed")
	}
	return nil
}

var services = []string{"watcher", "renderer", "validator", "deployer"}

// run is the state of one run.
type run struct {
	t     testing.TB
	o     Options
	dir   string
	bin   string
	rng   *rand.Rand // of the faults, under mu; the edits have their own
	mf    *manifests
	nats  *testkit.Cluster
	procs []*proc
	res   *Result

	mu     sync.Mutex
	events []string
}

// Run runs the scenario and returns its record. Failing to set up (a
// build, the cluster, the first render) fails the test; the services not
// converging does not: it is the result.
func Run(t testing.TB, o Options) *Result {
	t.Helper()
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
	r.res = &Result{Options: o, Start: time.Now().UTC(), Errors: map[string]*logGroup{}, DLQ: map[string]int{}}
	r.setupDir()
	r.buildBinaries()
	r.nats = testkit.NATSCluster(t, testkit.ClusterLogDir(filepath.Join(r.dir, "nats")))
	r.writeConfig()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	r.startServices(ctx, &wg)

	r.res.Objects = r.mf.objects()
	r.res.InitialConverged, r.res.InitialTime, r.res.InitialMismatch = r.converge("initial", time.Now())
	r.logf("initial: converged=%v after %v (%d objects)", r.res.InitialConverged, r.res.InitialTime.Round(time.Millisecond), r.res.Objects)

	lastEdit := r.editWithFaults()
	r.res.Converged, r.res.ConvergeTime, r.res.Mismatch = r.converge("final", lastEdit)
	r.logf("after %d edits: converged=%v after %v", r.res.EditsDone, r.res.Converged, r.res.ConvergeTime.Round(time.Millisecond))

	if r.o.FailoverRounds > 0 && r.res.Converged {
		r.failover()
	}
	r.checkHeartbeats()
	if !r.res.Converged || !r.res.InitialConverged {
		r.dumpResources()
	}
	r.collectDLQ()
	cancel()
	wg.Wait()
	for _, p := range r.procs {
		r.res.Procs = append(r.res.Procs, p.stats())
	}
	r.collectLogs()
	r.mu.Lock()
	events := strings.Join(r.events, "\n") + "\n"
	r.mu.Unlock()
	if err := os.WriteFile(filepath.Join(r.dir, "events.log"), []byte(events), 0o644); err != nil {
		r.t.Errorf("write events.log: %v", err)
	}
	r.res.Dir = r.dir
	if r.res.Converged && r.res.InitialConverged && len(r.res.Races) == 0 && !o.Keep {
		_ = os.RemoveAll(r.dir)
		r.res.Dir = ""
	}
	return r.res
}

func (r *run) logf(format string, args ...any) {
	line := time.Now().UTC().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.events = append(r.events, line)
	r.mu.Unlock()
	r.t.Log(line)
}

func (r *run) setupDir() {
	r.dir = r.o.Dir
	if r.dir != "" {
		// A run starts from nothing: files of an earlier run would be
		// taken for this one's.
		if entries, err := os.ReadDir(r.dir); err == nil && len(entries) > 0 {
			r.t.Fatalf("run folder %s is not empty", r.dir)
		}
	} else {
		d, err := os.MkdirTemp("", "weft-chaos-")
		if err != nil {
			r.t.Fatal(err)
		}
		r.dir = d
	}
	for _, d := range []string{"logs", "nats", "out", "bin"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			r.t.Fatal(err)
		}
	}
	r.t.Logf("run folder %s", r.dir)
	// The edits have their own random source: the same seed makes the same
	// edits whatever the faults do.
	edits := rand.New(rand.NewPCG(r.o.Seed, r.o.Seed^0x5851f42d4c957f2d))
	mf, err := newManifests(filepath.Join(r.dir, "manifests"), filepath.Join(r.dir, "tmp"), r.o.Sites, edits)
	if err != nil {
		r.t.Fatal(err)
	}
	r.mf = mf
	r.t.Cleanup(func() { _ = mf.log.Close() })
}

// buildBinaries puts the service binaries and weft in the run folder
// unless Options.Bin has them. They are built as the test binary is
// (testkit.GoBuild): under `go test -race` with the race detector, so a
// race in a service fails the run (Result.Races) and their packages are
// compiled once, for the tests and them alike.
func (r *run) buildBinaries() {
	r.bin = r.o.Bin
	if r.bin != "" {
		return
	}
	r.bin = filepath.Join(r.dir, "bin")
	if err := os.MkdirAll(r.bin, 0o755); err != nil {
		r.t.Fatal(err)
	}
	pkgs := map[string]string{"weft": "github.com/weftio/weft/cmd/weft"}
	for _, s := range services {
		pkgs["weft-"+s] = fmt.Sprintf("github.com/weftio/weft/services/%s/cmd/weft-%s", s, s)
	}
	for name, pkg := range pkgs {
		if err := os.Symlink(testkit.GoBuild(r.t, pkg), filepath.Join(r.bin, name)); err != nil {
			r.t.Fatal(err)
		}
	}
}

// writeConfig writes weft.yaml: the quickstart's, with the manifests
// re-scanned every 5s and the files driver deploying to out/ without a
// reload command.
func (r *run) writeConfig() {
	src := filepath.Join(r.o.Root, "examples", "quickstart", "weft.yaml")
	data, err := os.ReadFile(src)
	if err != nil {
		r.t.Fatal(err)
	}
	y := string(data)
	for _, rep := range [][2]string{
		{"    rescan: 30s\n", "    rescan: 5s\n"},
		{"      reload_cmd: echo \"$(date -u +%FT%TZ) reload\" >> reloads.log\n", r.checkCmd()},
	} {
		if !strings.Contains(y, rep[0]) {
			r.t.Fatalf("%s has no %q: update the chaos harness", src, rep[0])
		}
		y = strings.Replace(y, rep[0], rep[1], 1)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "weft.yaml"), []byte(y), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// checkCmd is the deploy's check_cmd line: a second-long check when
// deployers are killed during their orders, so that the kill lands before
// the files are written; none otherwise.
func (r *run) checkCmd() string {
	if r.o.FailoverRounds > 0 && r.o.FailoverOf == "deployer" {
		return "      check_cmd: sleep 1\n"
	}
	return ""
}

func (r *run) startServices(ctx context.Context, wg *sync.WaitGroup) {
	for _, s := range services {
		for i := range r.o.Replicas {
			name := fmt.Sprintf("%s-%d", s, i+1)
			p := &proc{
				name: name,
				bin:  filepath.Join(r.bin, "weft-"+s),
				log:  filepath.Join(r.dir, "logs", name+".log"),
				args: []string{
					"--config", filepath.Join(r.dir, "weft.yaml"),
					"--nats-url", r.nats.URL(),
					"--replicas", "3",
					"--listen", "127.0.0.1:0",
				},
			}
			r.procs = append(r.procs, p)
			wg.Add(1)
			go func() { defer wg.Done(); p.run(ctx) }()
		}
	}
}

// converge renders the manifests as they are now with `weft render` and
// waits until out/ holds exactly that, for Settle at most. It returns the
// time from since to the first exact match, or the last difference.
func (r *run) converge(label string, since time.Time) (bool, time.Duration, string) {
	ref := r.renderRef()
	deadline := since.Add(r.o.Settle)
	var diff error
	for {
		diff = sameTree(ref, filepath.Join(r.dir, "out"))
		if diff == nil {
			at := time.Since(since)
			// A match that does not hold was not convergence.
			time.Sleep(3 * time.Second)
			if diff = sameTree(ref, filepath.Join(r.dir, "out")); diff == nil {
				return true, at, ""
			}
			r.logf("matched after %v but then: %v", at.Round(time.Millisecond), diff)
		}
		if time.Now().After(deadline) {
			r.snapshot(label)
			return false, time.Since(since), diff.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// renderRef renders the manifests as they are into ref/ with `weft
// render`, and returns the folder.
func (r *run) renderRef() string {
	ref := filepath.Join(r.dir, "ref")
	_ = os.RemoveAll(ref)
	cmd := exec.Command(filepath.Join(r.bin, "weft"), "render", "--config", filepath.Join(r.dir, "weft.yaml"),
		"--target", "quickstart", "--resources", r.mf.dir, "--out", ref)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("weft render: %v\n%s", err, out)
	}
	return ref
}

// editDeployed edits the manifests until an edit changes what is
// deployed (an edit of a site whose Ingress is of another class changes
// nothing), and returns the edits made.
func (r *run) editDeployed() string {
	var done []string
	for range 20 {
		what, err := r.mf.edit()
		if err != nil {
			r.t.Fatalf("edit: %v", err)
		}
		done = append(done, what)
		if sameTree(r.renderRef(), filepath.Join(r.dir, "out")) != nil {
			break
		}
	}
	return strings.Join(done, "; ")
}

// snapshot copies out/ and ref/ to <label>-out/ and <label>-ref/ in the run
// folder, for a person to compare.
func (r *run) snapshot(label string) {
	for _, d := range []string{"out", "ref"} {
		cmd := exec.Command("cp", "-a", filepath.Join(r.dir, d), filepath.Join(r.dir, label+"-"+d))
		if out, err := cmd.CombinedOutput(); err != nil {
			r.logf("keep %s: %v %s", d, err, out)
		}
	}
}

// sameTree compares the files under want and got byte for byte, ignoring
// the files driver's own entries (".weft-*").
func sameTree(want, got string) error {
	w, err := readTree(want)
	if err != nil {
		return err
	}
	g, err := readTree(got)
	if err != nil {
		return err
	}
	var diffs []string
	for p, wd := range w {
		gd, ok := g[p]
		switch {
		case !ok:
			diffs = append(diffs, p+" missing")
		case gd != wd:
			diffs = append(diffs, p+" differs ("+lineDiff(wd, gd)+")")
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			diffs = append(diffs, p+" not rendered")
		}
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, ", "))
	}
	return nil
}

func readTree(root string) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".weft-") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = string(data)
		return nil
	})
	return files, err
}

// lineDiff says which lines one text has that the other lacks, as counts
// and a first example of each.
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var missing, extra int
	var exMissing, exExtra string
	for l, n := range w {
		if d := n - g[l]; d > 0 {
			missing += d
			if exMissing == "" || l < exMissing {
				exMissing = l
			}
		}
	}
	for l, n := range g {
		if d := n - w[l]; d > 0 {
			extra += d
			if exExtra == "" || l < exExtra {
				exExtra = l
			}
		}
	}
	out := fmt.Sprintf("%d lines missing, %d not rendered", missing, extra)
	if exMissing != "" {
		out += fmt.Sprintf("; missing %q", strings.TrimSpace(exMissing))
	}
	if exExtra != "" {
		out += fmt.Sprintf("; not rendered %q", strings.TrimSpace(exExtra))
	}
	return out
}
