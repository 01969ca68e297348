package statusview_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/cmd/weft/internal/statusview"
	"github.com/weftio/weft/pkg/msg"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestWrite prints reports as people read them; the golden files under
// testdata/ are the expected output (-update rewrites them).
func TestWrite(t *testing.T) {
	at := time.Date(2026, 11, 24, 14, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		rep  msg.StatusReport
	}{
		{"empty", msg.StatusReport{At: at}},
		{"target-and-pulls", msg.StatusReport{
			At: at,
			Targets: []msg.TargetReport{{
				Target:     "edge",
				Render:     &msg.RenderStatus{Target: "edge", Version: 4, BundleHash: "0123456789abcdef"},
				Validation: &msg.ValidationStatus{Target: "edge", Version: 4, OK: true},
				Deploys:    []msg.DeployStatus{{Target: "edge", Instance: "local", Version: 4, BundleHash: "0123456789abcdef", Reloads: map[string]int64{"structure": 2}}},
			}},
			Syncs: []msg.SyncStatus{{Source: "k8s", Type: "deployments", Synced: true, Count: 12}},
			Pulls: []msg.PullStatus{
				{Namespace: "shop", Name: "web-5f7c", Node: "node-1", Phase: msg.PullPulling, Images: []msg.ImagePull{
					{Image: "registry.example/shop/web:2", Phase: msg.PullPulled},
					{Image: "registry.example/shop/sidecar:7", Phase: msg.PullPulling, Message: "waiting for a slot of registry registry.example"},
				}},
				{Namespace: "shop", Name: "web-5f7c", Node: "node-2", Phase: msg.PullFailed, Images: []msg.ImagePull{
					{Image: "registry.example/shop/web:2", Phase: msg.PullFailed, Attempts: 3, Message: "manifest unknown"},
				}},
			},
		}},
		{"warnings", msg.StatusReport{
			At: at,
			Targets: []msg.TargetReport{{
				Target: "ingress",
				Render: &msg.RenderStatus{Target: "ingress", Version: 3, BundleHash: "0123456789abcdef", Errors: []msg.ResourceError{
					{Type: "ingresses", ID: "kube.ingresses.apps.a-new", Message: `ingress apps/a-new: Prefix path "/api" of host "app.example" ignored: ingress apps/z-old has it and is older (or as old and first by namespace/name)`},
					{Type: "ingresses", ID: "kube.ingresses.apps.a-catchall", Message: "ingress apps/a-catchall: defaultBackend ignored: ingress apps/b-catchall has the default backend and is older (or as old and first by namespace/name)"},
				}},
				Validation: &msg.ValidationStatus{Target: "ingress", Version: 3, OK: true},
				Deploys:    []msg.DeployStatus{{Target: "ingress", Instance: "local", Version: 3, BundleHash: "0123456789abcdef"}},
			}},
		}},
		{"fast-path", msg.StatusReport{
			At: at,
			Targets: []msg.TargetReport{
				{
					Target:     "edge",
					Render:     &msg.RenderStatus{Target: "edge", Version: 9, BundleHash: "fedcba9876543210"},
					Validation: &msg.ValidationStatus{Target: "edge", Version: 9, BundleHash: "fedcba9876543210", OK: true, Pending: "fedcba9876543210", PendingVersion: 9, LastFull: "0123456789abcdef", LastFullVersion: 8},
					Deploys:    []msg.DeployStatus{{Target: "edge", Instance: "local", Version: 9, BundleHash: "fedcba9876543210"}},
				},
				{
					Target:     "shop",
					Render:     &msg.RenderStatus{Target: "shop", Version: 5, BundleHash: "1111111111111111"},
					Validation: &msg.ValidationStatus{Target: "shop", Version: 5, BundleHash: "1111111111111111", OK: true, LastFull: "1111111111111111", LastFullVersion: 5, FullOnly: true},
				},
			},
		}},
	}
	t.Run("failing fast path", func(t *testing.T) {
		got := statusview.Failing(tests[len(tests)-1].rep)
		want := []string{"shop: a provisionally accepted bundle was refused by the whole check and rolled back to v5; every render is checked whole until one is accepted"}
		if !slices.Equal(got, want) {
			t.Errorf("Failing = %q, want %q", got, want)
		}
	})
	sites := msg.StatusReport{
		At: at,
		Targets: []msg.TargetReport{
			{
				Target:     "edge",
				Render:     &msg.RenderStatus{Target: "edge", Version: 7, BundleHash: "89abcdef01234567"},
				Validation: &msg.ValidationStatus{Target: "edge", Version: 7, OK: true},
				Deploys: []msg.DeployStatus{
					{Target: "edge", Instance: "lb-1", Site: "edge-1", Version: 6, BundleHash: "0123456789abcdef", Reloads: map[string]int64{"structure": 3}},
					{Target: "edge", Instance: "lb-2", Site: "edge-1", Version: 6, BundleHash: "0123456789abcdef", Reloads: map[string]int64{"structure": 3}},
				},
			},
			{
				Target:     "shop",
				Render:     &msg.RenderStatus{Target: "shop", Version: 2, BundleHash: "fedcba9876543210"},
				Validation: &msg.ValidationStatus{Target: "shop", Version: 2, OK: true},
				Deploys:    []msg.DeployStatus{{Target: "shop", Instance: "local", Version: 2, BundleHash: "fedcba9876543210"}},
			},
			{
				Target:  "store",
				Deploys: []msg.DeployStatus{{Target: "store", Instance: "local", Site: "edge-2", Version: 1, BundleHash: "aaaabbbbccccdddd"}},
			},
		},
		Sites: []msg.SiteStatus{
			{Site: "edge-1", LastHeard: at.Add(-95 * time.Second), Lag: 4},
			{Site: "edge-2", Reachable: true, LastHeard: at},
			{Site: "edge-3", Error: "nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable"},
		},
	}
	tests = append(tests, struct {
		name string
		rep  msg.StatusReport
	}{"sites", sites}, struct {
		name string
		rep  msg.StatusReport
	}{"pinned", msg.StatusReport{
		At: at,
		Targets: []msg.TargetReport{
			{
				Target:     "edge",
				Render:     &msg.RenderStatus{Target: "edge", Version: 4, BundleHash: "89abcdef01234567"},
				Validation: &msg.ValidationStatus{Target: "edge", Version: 4, OK: true, LastGood: "89abcdef01234567", LastGoodVersion: 4},
				Deploys: []msg.DeployStatus{
					{Target: "edge", Instance: "a", Version: 1, BundleHash: "0123456789abcdef", Reloads: map[string]int64{"structure": 2}},
					{Target: "edge", Instance: "b", Version: 1, BundleHash: "0123456789abcdef", Reloads: map[string]int64{"structure": 2}},
				},
				Pin: &msg.Pin{Target: "edge", Version: 1, BundleHash: "0123456789abcdef", Since: at.Add(-10 * time.Minute), By: "alice", Reason: "v2 drops the /api route"},
			},
			{
				Target:     "shop",
				Validation: &msg.ValidationStatus{Target: "shop", Version: 2, OK: true},
				Deploys:    []msg.DeployStatus{{Target: "shop", Instance: "local", Version: 2, BundleHash: "fedcba9876543210"}},
				Pin:        &msg.Pin{Target: "shop", Version: 2, BundleHash: "fedcba9876543210", Since: at.Add(-time.Hour)},
			},
		},
	}})
	canary := msg.StatusReport{
		At: at,
		Targets: []msg.TargetReport{
			{
				Target:     "edge",
				Validation: &msg.ValidationStatus{Target: "edge", Version: 5, OK: true, LastGood: "5555555555555555", LastGoodVersion: 5},
				Deploys: []msg.DeployStatus{
					{Target: "edge", Instance: "a", Version: 5, BundleHash: "5555555555555555"},
					{Target: "edge", Instance: "b", Version: 4, BundleHash: "4444444444444444"},
				},
				Canary: &msg.Canary{Target: "edge", Version: 5, BundleHash: "5555555555555555", PreviousVersion: 4, PreviousHash: "4444444444444444",
					Instances: []msg.CanaryInstance{{Instance: "a"}}, Hold: time.Minute, StartedAt: at.Add(-25 * time.Second), HoldFrom: at.Add(-20 * time.Second), Phase: msg.CanaryHolding},
			},
			{
				Target:     "shop",
				Validation: &msg.ValidationStatus{Target: "shop", Version: 3, OK: true, LastGood: "3333333333333333", LastGoodVersion: 3},
				Deploys: []msg.DeployStatus{
					{Target: "shop", Instance: "a", Version: 2, BundleHash: "2222222222222222"},
					{Target: "shop", Instance: "b", Version: 2, BundleHash: "2222222222222222"},
				},
				Canary: &msg.Canary{Target: "shop", Version: 3, BundleHash: "3333333333333333", PreviousVersion: 2, PreviousHash: "2222222222222222",
					Instances: []msg.CanaryInstance{{Instance: "a"}}, Hold: time.Minute, StartedAt: at.Add(-2 * time.Minute), HoldFrom: at.Add(-110 * time.Second),
					Phase: msg.CanaryRefused, Reason: "canary: instance a: backend be_app: 3 of 3 servers down", DecidedAt: at.Add(-50 * time.Second), Ordered: true},
			},
		},
	}
	tests = append(tests, struct {
		name string
		rep  msg.StatusReport
	}{"canary", canary})
	t.Run("failing canary", func(t *testing.T) {
		got := statusview.Failing(canary)
		want := []string{"shop: canary of v3 refused: canary: instance a: backend be_app: 3 of 3 servers down"}
		if !slices.Equal(got, want) {
			t.Errorf("Failing = %q, want %q", got, want)
		}
	})
	t.Run("failing sites", func(t *testing.T) {
		got := statusview.Failing(sites)
		want := []string{
			"site edge-1: site unreachable since 2026-11-24T13:58:25Z (1m35s)",
			"site edge-3: site unreachable: not heard from since the hub's NATS started: nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable",
		}
		if !slices.Equal(got, want) {
			t.Errorf("Failing = %q, want %q", got, want)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			statusview.Write(&b, tt.rep)
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("output differs from %s:\n%s", golden, b.String())
			}
		})
	}
}

// TestWarningsBounded checks that a target's warnings are listed up to a
// bound, with the count of the rest.
func TestWarningsBounded(t *testing.T) {
	var errs []msg.ResourceError
	for i := range 23 {
		errs = append(errs, msg.ResourceError{Type: "ingresses", ID: fmt.Sprintf("kube.ingresses.apps.i%02d", i), Message: fmt.Sprintf("problem %d", i)})
	}
	var b bytes.Buffer
	statusview.Write(&b, msg.StatusReport{Targets: []msg.TargetReport{{Target: "ingress", Render: &msg.RenderStatus{Target: "ingress", Version: 1, Errors: errs}}}})
	out := b.String()
	if !strings.Contains(out, "kube.ingresses.apps.i19  problem 19\n") || strings.Contains(out, "problem 20") {
		t.Errorf("not the first 20 warnings:\n%s", out)
	}
	if !strings.Contains(out, "  3 more (weft status --json lists them)\n") {
		t.Errorf("no count of the rest:\n%s", out)
	}
}
