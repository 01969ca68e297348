package chaos_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/hack/chaos"
)

var (
	full        = flag.Bool("chaos", false, "run TestChaos (make chaos sets it)")
	mode        = flag.String("mode", string(chaos.Faults), "faults, no-faults or lose-node")
	seed        = flag.Uint64("seed", 0, "random seed (0: from the clock)")
	sites       = flag.Int("sites", 100, "sites in the manifests folder (an Ingress, a Service and an EndpointSlice each)")
	edits       = flag.Int("edits", 1000, "edits to the manifests")
	duration    = flag.Duration("duration", 90*time.Second, "how long the edits take")
	serviceKill = flag.Duration("service-kill-every", 10*time.Second, "mean interval between kills of a service replica")
	nodeKill    = flag.Duration("node-kill-every", 20*time.Second, "mean interval between kills of a NATS node")
	replace     = flag.Duration("replace-after", 30*time.Second, "lose-node: replace the lost node this long after (0: never)")
	settle      = flag.Duration("settle", 3*time.Minute, "longest wait for convergence")
	replicas    = flag.Int("replicas", 2, "processes of each service")
	bin         = flag.String("bin", "", "folder of the weft binaries (make build); empty builds them")
	dir         = flag.String("dir", "", "run folder (default: a new temporary one)")
	keep        = flag.Bool("keep", false, "keep the run folder of a converged run")
	results     = flag.String("results", "", "append the run as a row to this markdown table")
	failover    = flag.Int("failover", 0, "after the edits, kill the render lease holder (or, with -failover-of deployer, the deployer carrying out an order) this many times and time the next deploy")
	failoverOf  = flag.String("failover-of", "renderer", "renderer or deployer: whose replica -failover kills")
)

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func report(t *testing.T, res *chaos.Result, table string) {
	t.Helper()
	t.Log("\n" + res.Summary())
	t.Log(chaos.TableHeader + res.Row())
	if table != "" {
		if err := res.AppendRow(table); err != nil {
			t.Errorf("append the results row: %v", err)
		}
	}
	if !res.InitialConverged {
		t.Errorf("the initial manifests were not deployed as weft render renders them: %s", res.InitialMismatch)
	}
	if !res.Converged {
		t.Errorf("not converged %v after the last edit: %s", res.Options.Settle, res.Mismatch)
	}
	if res.Heartbeats != "" {
		t.Errorf("validator heartbeats: %s", res.Heartbeats)
	}
	if len(res.Races) > 0 {
		t.Errorf("data races reported by %v (their logs are in the run folder %s)", res.Races, res.Dir)
	}
}

// TestChaos is `make chaos`: every service with Replicas processes on a
// 3-node NATS cluster (R3 streams and buckets), a folder of a few hundred
// objects edited 1,000 times over 90s while, in faults mode, a service
// replica is killed every ~10s and a NATS node every ~20s; it fails unless
// the deployed files end up byte for byte what `weft render` makes of the
// final manifests. Flags (after -args) choose the scenario.
func TestChaos(t *testing.T) {
	if !*full {
		t.Skip("run with -chaos (make chaos)")
	}
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	b := *bin
	if b != "" {
		var err error
		if b, err = filepath.Abs(b); err != nil {
			t.Fatal(err)
		}
	}
	res := chaos.Run(t, chaos.Options{
		Mode: chaos.Mode(*mode), Seed: s, Sites: *sites, Edits: *edits, Duration: *duration,
		ServiceKillEvery: *serviceKill, NodeKillEvery: *nodeKill, ReplaceAfter: *replace,
		Settle: *settle, Replicas: *replicas, Bin: b, Root: root(t), Dir: *dir, Keep: *keep, FailoverRounds: *failover, FailoverOf: *failoverOf,
	})
	report(t, res, *results)
}

// TestChaosShort is the short form of TestChaos for the test suite: 10
// sites (30 objects), 100 edits over 20s, a service replica killed every
// ~5s and a NATS node every ~10s. It builds the binaries itself.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster and 8 service processes")
	}
	res := chaos.Run(t, chaos.Options{
		Mode: chaos.Faults, Seed: 1, Sites: 10, Edits: 100, Duration: 20 * time.Second,
		ServiceKillEvery: 5 * time.Second, NodeKillEvery: 10 * time.Second,
		Settle: 2 * time.Minute, Replicas: 2, Root: root(t),
	})
	report(t, res, os.Getenv("WEFT_CHAOS_RESULTS"))
}
