package slots_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
)

// The workload of TestLimitsAcrossKilledProcesses: units of work (image
// pulls), each on one of nodes and from one of registries, shared out by
// unit mod workers among that many processes.
const (
	units, nodes, registries, workers = 200, 20, 5, 3
	clusterLimit, nodeLimit, regLimit = 10, 2, 4
	perWorker                         = 6 // goroutines working units in each process
	workerTTL                         = 3 * time.Second
	doneBucket                        = "slots-test-done"
	// lostGrace is how long a worker takes at most to stop a unit's work
	// once its Held reports a slot lost: the window the package documents.
	lostGrace = 200 * time.Millisecond
)

// The environment of a worker process.
const (
	workerEnv = "WEFT_SLOTS_TEST_WORKER" // its index: it works units with unit mod workers == index
	natsEnv   = "WEFT_SLOTS_TEST_NATS"
	eventsEnv = "WEFT_SLOTS_TEST_EVENTS" // the file every worker appends its events to
)

func unitLimits(u int) []slots.Limit {
	return []slots.Limit{
		{Scope: msg.ClusterSlotScope, N: clusterLimit},
		{Scope: msg.NodeSlotScope(fmt.Sprintf("node-%d", u%nodes)), N: nodeLimit},
		{Scope: msg.RegistrySlotScope(fmt.Sprintf("r%d.example.com", (u/nodes)%registries)), N: regLimit},
	}
}

// TestLimitsAcrossKilledProcesses runs on a real 3-node NATS cluster: 3
// worker processes (this test binary, re-executed) acquire slots for 200
// units of work over 20 nodes and 5 registries (limits 10 in the cluster,
// 2 per node, 4 per registry), work a moment under them, and release them,
// while the test SIGKILLs a random worker about every second and starts it
// again, and kills and restarts the NATS node leading the leases bucket
// once. Each worker appends when
// it starts and ends a unit's work to a shared file; the test replays the
// file (a killed worker's work ends when it is killed) and asserts that at
// no instant did a scope have more units at work than its limit, beyond
// the documented window (a worker's time to stop once it hears a slot is
// lost), and that every unit was done.
func TestLimitsAcrossKilledProcesses(t *testing.T) {
	if idx := os.Getenv(workerEnv); idx != "" {
		runWorker(t, idx)
		return
	}
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster and 3 worker processes")
	}
	c := testkit.NATSCluster(t)
	b := c.Bus(t, -1)
	c.Provision(t, b)
	js := b.JS
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: doneBucket, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(t.TempDir(), "events")
	t.Setenv(natsEnv, c.URL())
	t.Setenv(eventsEnv, events)
	start := func(i int) *testkit.Process {
		t.Setenv(workerEnv, strconv.Itoa(i))
		return testkit.StartProcess(t, os.Args[0], "-test.run=^TestLimitsAcrossKilledProcesses$")
	}
	procs := make([]*testkit.Process, workers)
	for i := range procs {
		procs[i] = start(i)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	killedAt := map[int]time.Time{} // pid → when it was gone
	natsDone := make(chan error, 1)
	natsKilled := false
	began := time.Now()
	for {
		log := readEvents(t, events)
		if len(log.done) == units {
			break
		}
		if time.Since(began) > 3*time.Minute {
			t.Fatalf("%d of %d units done after %v", len(log.done), units, time.Since(began))
		}
		time.Sleep(700*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond))))
		if !natsKilled && time.Since(began) > 4*time.Second {
			natsKilled = true
			node := leaderOf(t, c, js, msg.KVStream(msg.BucketLeases))
			if err := c.Kill(node); err != nil {
				t.Fatal(err)
			}
			t.Logf("killed nats-server %s, the leader of the leases bucket", c.Name(node))
			go func() {
				time.Sleep(2 * time.Second)
				natsDone <- c.Restart(node)
			}()
		}
		i := rng.IntN(workers)
		pid := procs[i].Pid()
		procs[i].Kill(t)
		killedAt[pid] = time.Now()
		procs[i] = start(i)
	}
	if natsKilled {
		if err := <-natsDone; err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		p.Kill(t)
	}
	log := readEvents(t, events)
	t.Logf("%d units done in %v; %d worker kills; %d runs of a unit, %d cut by a kill, %d stopped on a lost slot",
		len(log.done), time.Since(began).Round(time.Millisecond), len(killedAt), len(log.runs), log.cut(killedAt), log.lost())
	if len(killedAt) < 5 || log.cut(killedAt) == 0 {
		t.Fatalf("%d kills, %d runs cut by one: the test did not kill workers at work", len(killedAt), log.cut(killedAt))
	}
	peak, violations := log.replay(killedAt, lostGrace)
	for _, v := range violations {
		t.Error(v)
	}
	if peak[msg.ClusterSlotScope] != clusterLimit {
		t.Errorf("at most %d units at work at once, never the cluster limit %d: the test saw no contention", peak[msg.ClusterSlotScope], clusterLimit)
	}
	if _, strict := log.replay(killedAt, 0); len(strict) > 0 {
		t.Logf("%d overlaps within the window of a lost slot, the first: %s", len(strict), strict[0])
	}
}

// leaderOf is the index of the node leading stream.
func leaderOf(t *testing.T, c *testkit.Cluster, js jetstream.JetStream, stream string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Size() {
		if info.Cluster != nil && c.Name(i) == info.Cluster.Leader {
			return i
		}
	}
	t.Fatalf("stream %s has no leader among the nodes: %+v", stream, info.Cluster)
	return -1
}

// run is one unit's work in one process: from its start to its end, or to
// the process's death.
type run struct {
	unit, pid  int
	start, end time.Time // end zero: the process was killed at work
	lost       bool      // ended because a slot was lost
}

type eventLog struct {
	runs []*run
	done map[int]bool
}

// readEvents parses the lines workers append: "<event> <unit> <pid>
// <unix nanoseconds>", event start, end, lost or done.
func readEvents(t *testing.T, path string) eventLog {
	t.Helper()
	log := eventLog{done: map[int]bool{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return log
	}
	if err != nil {
		t.Fatal(err)
	}
	// A line being appended while the file is read is left for next time.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	open := map[[2]int]*run{}
	for line := range strings.Lines(string(data)) {
		var ev string
		var u, pid int
		var ns int64
		if _, err := fmt.Sscanf(line, "%s %d %d %d\n", &ev, &u, &pid, &ns); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		at := time.Unix(0, ns)
		k := [2]int{u, pid}
		switch ev {
		case "start":
			r := &run{unit: u, pid: pid, start: at}
			log.runs = append(log.runs, r)
			open[k] = r
		case "end", "lost":
			r := open[k]
			if r == nil {
				t.Fatalf("%q ends no run", line)
			}
			r.end, r.lost = at, ev == "lost"
			delete(open, k)
		case "done":
			log.done[u] = true
		default:
			t.Fatalf("unknown event %q", line)
		}
	}
	return log
}

func (l eventLog) cut(killedAt map[int]time.Time) int {
	n := 0
	for _, r := range l.runs {
		if r.end.IsZero() && !killedAt[r.pid].IsZero() {
			n++
		}
	}
	return n
}

func (l eventLog) lost() int {
	n := 0
	for _, r := range l.runs {
		if r.lost {
			n++
		}
	}
	return n
}

// replay walks every start and end in time order and returns the most
// units at work at once per scope, and every instant a scope had more than
// its limit. A run stopped on a lost slot counts until grace before its
// end; a run cut by a kill counts until the kill.
func (l eventLog) replay(killedAt map[int]time.Time, grace time.Duration) (peak map[string]int, violations []string) {
	type edge struct {
		at    time.Time
		delta int
		r     *run
	}
	var edges []edge
	for _, r := range l.runs {
		end := r.end
		switch {
		case end.IsZero() && !killedAt[r.pid].IsZero():
			end = killedAt[r.pid]
		case end.IsZero():
			end = time.Now()
		case r.lost:
			end = end.Add(-grace)
		}
		if end.Before(r.start) {
			end = r.start
		}
		edges = append(edges, edge{r.start, 1, r}, edge{end, -1, r})
	}
	// Starts before ends at the same instant: the stricter reading.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta
	})
	atWork := map[string]map[int]int{} // scope → unit → runs at work
	peak = map[string]int{}
	for _, e := range edges {
		for _, lim := range unitLimits(e.r.unit) {
			m := atWork[lim.Scope]
			if m == nil {
				m = map[int]int{}
				atWork[lim.Scope] = m
			}
			m[e.r.unit] += e.delta
			if m[e.r.unit] == 0 {
				delete(m, e.r.unit)
			}
			peak[lim.Scope] = max(peak[lim.Scope], len(m))
			if e.delta > 0 && len(m) > lim.N {
				violations = append(violations, fmt.Sprintf("%s: %d units at work at %s, limit %d: %v",
					lim.Scope, len(m), e.at.Format("15:04:05.000000"), lim.N, slices.Sorted(mapKeys(m))))
			}
		}
	}
	return peak, violations
}

func mapKeys(m map[int]int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// runWorker is a worker process: it works its units until each is done,
// then idles until it is killed.
func runWorker(t *testing.T, idx string) {
	index, err := strconv.Atoi(idx)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{pid: os.Getpid(), parent: os.Getppid(), pending: map[int]bool{}}
	for u := index; u < units; u += workers {
		w.pending[u] = true
	}
	nc, err := nats.Connect(os.Getenv(natsEnv), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w.events, err = os.OpenFile(os.Getenv(eventsEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var leases jetstream.KeyValue
	w.retry(func(ctx context.Context) (err error) {
		if leases, err = js.KeyValue(ctx, msg.BucketLeases); err != nil {
			return err
		}
		w.done, err = js.KeyValue(ctx, doneBucket)
		return err
	})
	if w.slots, err = slots.New(leases, js, slots.WithTTL(workerTTL)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range perWorker {
		wg.Go(w.loop)
	}
	wg.Wait()
	for os.Getppid() == w.parent {
		time.Sleep(100 * time.Millisecond)
	}
}

type worker struct {
	pid, parent int
	slots       *slots.Slots
	done        jetstream.KeyValue
	events      *os.File

	mu      sync.Mutex
	pending map[int]bool      // units not known done, not at work here
	notTill map[int]time.Time // units whose limits were full, not to try before
}

// next is the lowest unit pending and not refused a moment ago, so that a
// restarted worker takes up the units its predecessor was killed at first.
func (w *worker) next() (unit int, ok, finished bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return 0, false, true
	}
	best := -1
	for u := range w.pending {
		if time.Now().Before(w.notTill[u]) {
			continue
		}
		if best < 0 || u < best {
			best = u
		}
	}
	if best < 0 {
		return 0, false, false
	}
	delete(w.pending, best)
	return best, true, false
}

func (w *worker) loop() {
	for os.Getppid() == w.parent {
		u, ok, finished := w.next()
		if finished {
			return
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if !w.work(u) {
			w.mu.Lock()
			w.pending[u] = true
			if w.notTill == nil {
				w.notTill = map[int]time.Time{}
			}
			w.notTill[u] = time.Now().Add(30 * time.Millisecond)
			w.mu.Unlock()
		}
	}
}

// work does unit u under its slots; false: not done, to try again.
func (w *worker) work(u int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := fmt.Sprintf("u%d", u)
	if _, err := w.done.Get(ctx, key); err == nil {
		// Done by a predecessor killed before it said so.
		w.event("done", u)
		return true
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	h, err := w.slots.Acquire(ctx, fmt.Sprintf("pull-%d", u), unitLimits(u)...)
	if err != nil {
		if !errors.Is(err, slots.ErrFull) {
			fmt.Fprintf(os.Stderr, "unit %d: %v\n", u, err)
		}
		return false
	}
	defer h.Release()
	w.event("start", u)
	select {
	case <-time.After(200*time.Millisecond + rand.N(600*time.Millisecond)):
	case <-h.Lost():
		w.event("lost", u)
		fmt.Fprintf(os.Stderr, "unit %d: %v\n", u, h.Err())
		return false
	}
	w.event("end", u)
	w.retry(func(ctx context.Context) error {
		_, err := w.done.Put(ctx, key, nil)
		return err
	})
	w.event("done", u)
	return true
}

func (w *worker) event(ev string, u int) {
	line := fmt.Sprintf("%s %d %d %d\n", ev, u, w.pid, time.Now().UnixNano())
	if _, err := w.events.WriteString(line); err != nil {
		fmt.Fprintf(os.Stderr, "write event: %v\n", err)
		os.Exit(2)
	}
}

// retry runs f with a timeout of its own until it succeeds.
func (w *worker) retry(f func(ctx context.Context) error) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		fmt.Fprintf(os.Stderr, "retry: %v\n", err)
		time.Sleep(100 * time.Millisecond)
	}
}
