//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestApply changes one running HAProxy per case and checks what the driver
// did (runtime commands or one reload), the traffic, the reload counter from
// show proc, and that a later reload from disk gives the same running state
// (nothing applied at runtime is lost).
func TestApply(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// from edits the base bundle HAProxy starts with; to edits it into
		// the bundle applied.
		from, to func(r *rig, s *spec)
		reason   string // "" for no reload
		ops      func(r *rig) []string
		written  []string
		removed  []string
		check    func(t *testing.T, r *rig)
	}{
		{
			name: "server slot address moves traffic",
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["C"]
			},
			ops: func(r *rig) []string {
				return []string{"set server be_app/SRV_1 addr 127.0.0.1 port " + r.port("C")}
			},
			written: []string{"haproxy.cfg"},
			check: func(t *testing.T, r *rig) {
				if got := r.spread("app.example", 6); !reflect.DeepEqual(got, map[string]int{"C": 6}) {
					t.Errorf("app.example answered by %v, want only C", got)
				}
			},
		},
		{
			name: "enabling a disabled slot adds it to the rotation",
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[2] = "server SRV_2 " + r.echo["C"]
			},
			ops: func(r *rig) []string {
				return []string{
					"set server be_app/SRV_2 addr 127.0.0.1 port " + r.port("C"),
					"set server be_app/SRV_2 state ready",
				}
			},
			written: []string{"haproxy.cfg"},
			check: func(t *testing.T, r *rig) {
				if got := r.spread("app.example", 10); got["B"] != 5 || got["C"] != 5 {
					t.Errorf("app.example answered by %v, want B and C in turn", got)
				}
			},
		},
		{
			name: "disabling a slot takes it out",
			from: func(r *rig, s *spec) {
				s.backend("be_app").lines[2] = "server SRV_2 " + r.echo["C"]
			},
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["B"] + " disabled"
				s.backend("be_app").lines[2] = "server SRV_2 " + r.echo["C"]
			},
			ops: func(r *rig) []string {
				return []string{"set server be_app/SRV_1 state maint"}
			},
			written: []string{"haproxy.cfg"},
			check: func(t *testing.T, r *rig) {
				if got := r.spread("app.example", 6); !reflect.DeepEqual(got, map[string]int{"C": 6}) {
					t.Errorf("app.example answered by %v, want only C", got)
				}
			},
		},
		{
			name: "a slot leaving service is disabled before its address changes",
			from: func(r *rig, s *spec) {
				s.backend("be_app").lines[2] = "server SRV_2 " + r.echo["C"]
			},
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[2] = "server SRV_2 127.0.0.1:1 disabled"
			},
			ops: func(r *rig) []string {
				return []string{
					"set server be_app/SRV_2 state maint",
					"set server be_app/SRV_2 addr 127.0.0.1 port 1",
				}
			},
			written: []string{"haproxy.cfg"},
			check: func(t *testing.T, r *rig) {
				if got := r.spread("app.example", 4); !reflect.DeepEqual(got, map[string]int{"B": 4}) {
					t.Errorf("app.example answered by %v, want only B", got)
				}
			},
		},
		{
			name: "weight zero drains a server",
			from: func(r *rig, s *spec) {
				s.backend("be_app").lines[2] = "server SRV_2 " + r.echo["C"]
			},
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["B"] + " weight 0"
				s.backend("be_app").lines[2] = "server SRV_2 " + r.echo["C"]
			},
			ops: func(*rig) []string {
				return []string{"set server be_app/SRV_1 weight 0"}
			},
			written: []string{"haproxy.cfg"},
			check: func(t *testing.T, r *rig) {
				if got := r.spread("app.example", 6); !reflect.DeepEqual(got, map[string]int{"C": 6}) {
					t.Errorf("app.example answered by %v, want only C", got)
				}
			},
		},
		{
			name: "a map entry reroutes a host",
			to: func(_ *rig, s *spec) {
				s.hostMap = strings.Replace(s.hostMap, "app.example be_app", "app.example be_other", 1)
			},
			ops: func(*rig) []string {
				return []string{"set map maps/host.map app.example be_other"}
			},
			written: []string{"maps/host.map"},
			check: func(t *testing.T, r *rig) {
				if got := r.get("app.example", "/"); got != "C" {
					t.Errorf("app.example answered by %q, want C", got)
				}
			},
		},
		{
			name: "map entries added and removed",
			to: func(_ *rig, s *spec) {
				s.hostMap = "new.example be_other\napp.example be_app\nstatic.example be_static\ndown.example be_down\n"
			},
			ops: func(*rig) []string {
				return []string{
					"add map maps/host.map new.example be_other",
					"del map maps/host.map other.example",
				}
			},
			written: []string{"maps/host.map"},
			check: func(t *testing.T, r *rig) {
				if got := r.get("new.example", "/"); got != "C" {
					t.Errorf("new.example answered by %q, want C", got)
				}
				if got := r.get("other.example", "/"); got != "A" {
					t.Errorf("other.example answered by %q, want A (the default backend)", got)
				}
			},
		},
		{
			name: "map values with blanks, semicolons and backslashes",
			to: func(_ *rig, s *spec) {
				s.hostMap += "odd.example value with  spaces;semi\\colon\ttab\n"
			},
			ops: func(*rig) []string {
				return []string{"add map maps/host.map odd.example value with  spaces;semi\\colon\ttab"}
			},
			written: []string{"maps/host.map"},
			check: func(t *testing.T, r *rig) {
				got := r.mapEntries("maps/host.map")
				if want := "odd.example value with  spaces;semi\\colon\ttab"; !slices.Contains(got, want) {
					t.Errorf("host.map at runtime = %q, want an entry %q", got, want)
				}
			},
		},
		{
			name: "an order-sensitive map is swapped in whole",
			to: func(_ *rig, s *spec) {
				// map_reg takes the first match: "^/api/v2" must come
				// before "^/api", which appending it would not give.
				s.pathMap = "^/api/v1 be_other\n^/api/v2 be_static\n^/api be_app\n"
			},
			ops: func(*rig) []string {
				return []string{
					"prepare map maps/path.map (version 1)",
					"add map @1 maps/path.map (3 entries)",
					"commit map @1 maps/path.map",
				}
			},
			written: []string{"maps/path.map"},
			check: func(t *testing.T, r *rig) {
				for path, want := range map[string]string{"/api/v2/x": "D", "/api/v1/x": "C", "/api/x": "B", "/x": "A"} {
					if got := r.get("any.example", path); got != want {
						t.Errorf("%s answered by %q, want %s", path, got, want)
					}
				}
			},
		},
		{
			name: "a longest-prefix map is patched in any order",
			to: func(_ *rig, s *spec) {
				// map_beg looks entries up in a prefix tree: appending
				// "/p/v2" after "/p" still matches it first.
				s.pfxMap = "/p/v1 be_other\n/p/v2 be_static\n/p be_app\n"
			},
			ops: func(*rig) []string {
				return []string{"add map maps/prefix.map /p/v2 be_static"}
			},
			written: []string{"maps/prefix.map"},
			check: func(t *testing.T, r *rig) {
				for path, want := range map[string]string{"/p/v2/x": "D", "/p/v1/x": "C", "/p/x": "B"} {
					if got := r.get("any.example", path); got != want {
						t.Errorf("%s answered by %q, want %s", path, got, want)
					}
				}
			},
		},
		{
			name: "a certificate is replaced at runtime",
			to: func(r *rig, s *spec) {
				s.cert = r.certTwo
			},
			ops: func(*rig) []string {
				return []string{"set ssl cert certs/site.pem", "commit ssl cert certs/site.pem"}
			},
			written: []string{"certs/site.pem"},
			check: func(t *testing.T, r *rig) {
				if got := r.certCN(); got != "two" {
					t.Errorf("served certificate %q, want two", got)
				}
			},
		},
		{
			name: "servers, maps and a certificate in one runtime apply",
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[3] = "server SRV_3 " + r.echo["D"] + " weight 3"
				s.hostMap = strings.Replace(s.hostMap, "other.example be_other", "other.example be_app", 1)
				s.cert = r.certTwo
			},
			ops: func(r *rig) []string {
				return []string{
					"set server be_app/SRV_3 addr 127.0.0.1 port " + r.port("D"),
					"set server be_app/SRV_3 weight 3",
					"set server be_app/SRV_3 state ready",
					"set map maps/host.map other.example be_app",
					"set ssl cert certs/site.pem",
					"commit ssl cert certs/site.pem",
				}
			},
			written: []string{"certs/site.pem", "haproxy.cfg", "maps/host.map"},
			check: func(t *testing.T, r *rig) {
				if got := r.spread("other.example", 8); got["B"] != 2 || got["D"] != 6 {
					t.Errorf("other.example answered by %v, want B 2 and D 6 (weights 1 and 3)", got)
				}
				if got := r.certCN(); got != "two" {
					t.Errorf("served certificate %q, want two", got)
				}
			},
		},
		{
			name:    "a comment is written without a reload",
			to:      func(_ *rig, s *spec) { s.comment = "changed by hand" },
			ops:     func(*rig) []string { return nil },
			written: []string{"haproxy.cfg"},
		},
		{
			name: "a file leaving the bundle is removed without a reload",
			from: func(_ *rig, s *spec) {
				s.extra = append(s.extra, File{Path: "files/notes/readme.txt", Content: []byte("notes\n")})
			},
			to:      func(_ *rig, s *spec) { s.extra = nil },
			ops:     func(*rig) []string { return nil },
			removed: []string{"files/notes/readme.txt"},
			check: func(t *testing.T, r *rig) {
				if r.exists("files/notes/readme.txt") {
					t.Error("files/notes/readme.txt is still there")
				}
			},
		},
		{
			name: "a new backend reloads once and serves",
			to: func(r *rig, s *spec) {
				s.backends = append(s.backends, backendSpec{name: "be_new", lines: []string{"server SRV_1 " + r.echo["D"]}})
				s.hostMap += "new.example be_new\n"
				s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["C"]
			},
			reason:  ReasonStructure,
			written: []string{"haproxy.cfg", "maps/host.map"},
			check: func(t *testing.T, r *rig) {
				if got := r.get("new.example", "/"); got != "D" {
					t.Errorf("new.example answered by %q, want D", got)
				}
				if got := r.get("app.example", "/"); got != "C" {
					t.Errorf("app.example answered by %q, want C", got)
				}
			},
		},
		{
			name: "a renamed server reloads",
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[3] = "server SRV_9 " + r.echo["D"]
			},
			reason:  ReasonStructure,
			written: []string{"haproxy.cfg"},
		},
		{
			name: "a server setting other than address, weight or state reloads",
			to: func(r *rig, s *spec) {
				s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["B"] + " maxconn 10"
			},
			reason:  ReasonStructure,
			written: []string{"haproxy.cfg"},
		},
		{
			name: "a refused runtime command falls back to a reload",
			to: func(r *rig, s *spec) {
				// balance source is a static algorithm: HAProxy refuses
				// weights other than 0 and 100% at runtime.
				s.backend("be_static").lines[1] = "server SRV_1 " + r.echo["D"] + " weight 5"
				s.hostMap = strings.Replace(s.hostMap, "app.example be_app", "app.example be_other", 1)
			},
			reason:  ReasonRuntimeFailed,
			written: []string{"haproxy.cfg", "maps/host.map"},
			check: func(t *testing.T, r *rig) {
				if got := r.get("static.example", "/"); got != "D" {
					t.Errorf("static.example answered by %q, want D", got)
				}
				if got := r.get("app.example", "/"); got != "C" {
					t.Errorf("app.example answered by %q, want C", got)
				}
				if !strings.Contains(r.adminDo("show servers state be_static"), "be_static 1 SRV_1 127.0.0.1 2 0 5 ") {
					t.Errorf("be_static/SRV_1 does not run with weight 5:\n%s", r.adminDo("show servers state be_static"))
				}
			},
		},
		{
			name: "a changed error page reloads",
			to: func(_ *rig, s *spec) {
				s.errPage = strings.Replace(s.errPage, "maintenance one", "maintenance two", 1)
			},
			reason:  ReasonFileChanged,
			written: []string{"files/503.http"},
			check: func(t *testing.T, r *rig) {
				if got := r.get("down.example", "/"); got != "status 503: maintenance two" {
					t.Errorf("down.example answered %q, want the new error page", got)
				}
			},
		},
		{
			name: "a new file reloads",
			to: func(_ *rig, s *spec) {
				s.extra = append(s.extra, File{Path: "certs/other.pem", Content: []byte("not used yet\n")})
			},
			reason:  ReasonNewFile,
			written: []string{"certs/other.pem"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, func(r *rig) spec {
				s := baseSpec(r)
				if tc.from != nil {
					tc.from(r, &s)
				}
				return s
			})
			from := baseSpec(r)
			if tc.from != nil {
				tc.from(r, &from)
			}
			to := from.clone()
			tc.to(r, &to)
			bundle := r.bundle(to)

			before := r.reloads()
			res := r.apply(bundle)
			after := r.reloads()

			wantReloads := before
			if tc.reason != "" {
				wantReloads++
			}
			if res.Reloaded != (tc.reason != "") || res.ReloadReason != tc.reason {
				t.Errorf("Reloaded %v with reason %q (%s), want reason %q", res.Reloaded, res.ReloadReason, res.ReloadDetail, tc.reason)
			}
			if after != wantReloads || res.Reloads != after {
				t.Errorf("show proc counts %d reloads (Result.Reloads %d), %d before: want %d", after, res.Reloads, before, wantReloads)
			}
			var wantOps []string
			if tc.ops != nil {
				wantOps = tc.ops(r)
			}
			if tc.reason == "" && !slices.Equal(res.RuntimeOps, wantOps) {
				t.Errorf("RuntimeOps = %q, want %q", res.RuntimeOps, wantOps)
			}
			if tc.reason == ReasonRuntimeFailed {
				if !strings.Contains(res.RuntimeError, "static LB algorithm") {
					t.Errorf("RuntimeError = %q, want HAProxy's refusal", res.RuntimeError)
				}
			} else if tc.reason != "" && len(res.RuntimeOps) > 0 {
				t.Errorf("a reload with RuntimeOps %q", res.RuntimeOps)
			}
			if !slices.Equal(res.Written, tc.written) || !slices.Equal(res.Removed, tc.removed) {
				t.Errorf("Written %q Removed %q, want %q and %q", res.Written, res.Removed, tc.written, tc.removed)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
			for _, f := range bundle {
				if got := r.read(f.Path); got != string(f.Content) {
					t.Errorf("%s on disk differs from the bundle", f.Path)
				}
			}
			if m := r.manifest(); m.Pending != "" || len(m.Files) != len(bundle) {
				t.Errorf("manifest %+v, want %d files and nothing pending", m, len(bundle))
			}

			// The same bundle again changes nothing.
			again := r.apply(bundle)
			if again.Reloaded || len(again.Written) > 0 || len(again.RuntimeOps) > 0 || again.Reloads != after {
				t.Errorf("second Apply of the same bundle: %+v", again)
			}

			// What runs now is what HAProxy loads from disk.
			runtimeState := r.running()
			r.forceReload()
			if loaded := r.running(); !reflect.DeepEqual(runtimeState, loaded) {
				t.Errorf("state after apply differs from the state loaded from disk:\napply:  %+v\nloaded: %+v", runtimeState, loaded)
			}
		})
	}
}

// TestSequence applies a series of bundles to one HAProxy: runtime changes
// before and after a reload reach the worker that serves.
func TestSequence(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	s := baseSpec(r)
	base := r.reloads()

	steps := []struct {
		name    string
		edit    func(s *spec)
		reloads int // since the start
		want    map[string]string
	}{
		{"runtime: address", func(s *spec) { s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["C"] }, 0,
			map[string]string{"app.example": "C"}},
		{"structure: new backend", func(s *spec) {
			s.backends = append(s.backends, backendSpec{name: "be_new", lines: []string{"server SRV_1 " + r.echo["B"]}})
			s.hostMap += "new.example be_new\n"
		}, 1, map[string]string{"app.example": "C", "new.example": "B"}},
		{"runtime after the reload: address and map", func(s *spec) {
			s.backend("be_new").lines[0] = "server SRV_1 " + r.echo["D"]
			s.hostMap = strings.Replace(s.hostMap, "app.example be_app", "app.example be_new", 1)
		}, 1, map[string]string{"app.example": "D", "new.example": "D"}},
		{"runtime: back", func(s *spec) {
			s.hostMap = strings.Replace(s.hostMap, "app.example be_new", "app.example be_app", 1)
		}, 1, map[string]string{"app.example": "C"}},
	}
	for _, st := range steps {
		st.edit(&s)
		res := r.apply(r.bundle(s))
		if got := r.reloads() - base; got != st.reloads || res.Reloads-base != st.reloads {
			t.Errorf("%s: %d reloads (Result %d), want %d", st.name, got, res.Reloads-base, st.reloads)
		}
		for host, want := range st.want {
			if got := r.get(host, "/"); got != want {
				t.Errorf("%s: %s answered by %q, want %q", st.name, host, got, want)
			}
		}
	}
}

// TestDrift: a file edited on disk is reported, and the next Apply restores
// it with a reload, since what HAProxy runs is then unknown.
func TestDrift(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	bundle := r.bundle(baseSpec(r))
	if d, err := r.drv.Drift(bundle); err != nil || len(d) != 0 {
		t.Fatalf("Drift before any edit = %q, %v", d, err)
	}
	path := filepath.Join(r.dir, "maps", "host.map")
	if err := os.WriteFile(path, []byte("app.example be_default\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(r.dir, "files", "503.http")); err != nil {
		t.Fatal(err)
	}
	d, err := r.drv.Drift(bundle)
	if err != nil || !slices.Equal(d, []string{"files/503.http", "maps/host.map"}) {
		t.Fatalf("Drift = %q, %v; want the edited and the removed file", d, err)
	}

	before := r.reloads()
	res := r.apply(bundle)
	if !res.Reloaded || res.ReloadReason != ReasonDrift || r.reloads() != before+1 {
		t.Errorf("Apply after drift: %+v, want one reload for drift", res)
	}
	if !slices.Equal(res.Written, []string{"files/503.http", "maps/host.map"}) {
		t.Errorf("Written = %q", res.Written)
	}
	if d, err := r.drv.Drift(bundle); err != nil || len(d) != 0 {
		t.Errorf("Drift after the repair = %q, %v", d, err)
	}
	if got := r.get("app.example", "/"); got != "B" {
		t.Errorf("app.example answered by %q, want B", got)
	}
}

// TestReloadFailure: HAProxy refuses the new configuration on reload (a
// port already taken); the old worker keeps serving, Apply reports
// ErrReloadFailed, and the next Apply reloads even with no new change.
func TestReloadFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	s := baseSpec(r)
	s.backends = append(s.backends, backendSpec{name: "be_new", lines: []string{"server SRV_1 " + r.echo["D"]}})
	bad := r.bundle(s)
	bad[0].Content = append(bad[0].Content, fmt.Sprintf("\nfrontend taken\n    bind %s\n    default_backend be_new\n", taken.Addr())...)

	before := r.reloads()
	res, err := r.drv.Apply(t.Context(), bad)
	if !errors.Is(err, ErrReloadFailed) {
		t.Fatalf("Apply of a bundle HAProxy cannot bind: %v, want ErrReloadFailed", err)
	}
	if res.Reloaded || res.ReloadReason != ReasonStructure {
		t.Errorf("result %+v, want a structure reload that did not happen", res)
	}
	st := r.proc()
	if st.failed != 1 || st.reloads != before+1 {
		t.Errorf("show proc: %+v, want one failed reload", st)
	}
	if got := r.get("app.example", "/"); got != "B" {
		t.Errorf("the previous worker does not serve: app.example answered %q", got)
	}
	if m := r.manifest(); m.Pending != ReasonStructure {
		t.Errorf("manifest pending = %q, want the failed reload recorded", m.Pending)
	}

	taken.Close()
	res = r.apply(bad)
	if !res.Reloaded || res.ReloadReason != ReasonPending || len(res.Written) != 0 {
		t.Errorf("Apply after the port is free: %+v, want a pending reload with nothing written", res)
	}
	if st := r.proc(); st.failed != 0 || st.reloads != before+2 {
		t.Errorf("show proc: %+v, want the second reload to succeed", st)
	}
	if m := r.manifest(); m.Pending != "" {
		t.Errorf("manifest still pending: %q", m.Pending)
	}
}

// TestInterruptedRuntime: an Apply cut off after its runtime commands leaves
// the manifest pending, and the next Apply reloads.
func TestInterruptedRuntime(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	s := baseSpec(r)
	s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["C"]
	bundle := r.bundle(s)

	// What an interrupted Apply leaves: the command went through, the
	// configuration was not written.
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m := r.manifest()
	m.Pending = "runtime commands"
	if err := r.drv.writeManifest(root, m); err != nil {
		t.Fatal(err)
	}
	r.adminDo("set server be_app/SRV_1 addr 127.0.0.1 port " + r.port("C"))

	before := r.reloads()
	res := r.apply(bundle)
	if !res.Reloaded || res.ReloadReason != ReasonPending || r.reloads() != before+1 {
		t.Errorf("Apply after an interruption: %+v, want a pending reload", res)
	}
	if got := r.get("app.example", "/"); got != "C" {
		t.Errorf("app.example answered by %q, want C", got)
	}
}

// TestFirstApply: without a record of an earlier delivery, a bundle equal to
// the disk is adopted without a reload (newRig checks it) and a different
// one reloads.
func TestFirstApply(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	if err := os.Remove(filepath.Join(r.dir, manifestName)); err != nil {
		t.Fatal(err)
	}
	s := baseSpec(r)
	s.hostMap += "new.example be_other\n"
	before := r.reloads()
	res := r.apply(r.bundle(s))
	if !res.Reloaded || res.ReloadReason != ReasonInitial || r.reloads() != before+1 {
		t.Errorf("first Apply of a different bundle: %+v, want an initial reload", res)
	}
	if got := r.get("new.example", "/"); got != "C" {
		t.Errorf("new.example answered by %q, want C", got)
	}
}

// TestWithoutAdminSocket: every change reloads, and the new worker is
// checked through the master.
func TestWithoutAdminSocket(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec, func(o *Options) { o.AdminSocket = "" })
	s := baseSpec(r)
	s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["C"]
	before := r.reloads()
	res := r.apply(r.bundle(s))
	if !res.Reloaded || res.ReloadReason != ReasonRuntimeDisabled || r.reloads() != before+1 {
		t.Errorf("Apply: %+v, want a runtime-disabled reload", res)
	}
	if got := r.get("app.example", "/"); got != "C" {
		t.Errorf("app.example answered by %q, want C", got)
	}
}

// TestAdminSocketUnreachable: the runtime commands cannot be sent, so the
// change is delivered by a reload, checked through the master.
func TestAdminSocketUnreachable(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec, func(o *Options) { o.AdminSocket = filepath.Join(filepath.Dir(o.MasterSocket), "wrong.sock") })
	s := baseSpec(r)
	s.backend("be_app").lines[1] = "server SRV_1 " + r.echo["C"]
	s.hostMap += "new.example be_other\n"
	before := r.reloads()
	res := r.apply(r.bundle(s))
	if !res.Reloaded || res.ReloadReason != ReasonRuntimeFailed || r.reloads() != before+1 {
		t.Errorf("Apply: %+v, want a runtime-failed reload", res)
	}
	if !strings.Contains(res.RuntimeError, "wrong.sock") {
		t.Errorf("RuntimeError = %q, want the connection error", res.RuntimeError)
	}
	if got := r.get("app.example", "/"); got != "C" {
		t.Errorf("app.example answered by %q, want C", got)
	}
}

// TestUnreachable: with no master socket, Apply writes the files, reports
// ErrUnreachable and keeps the reload pending.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := New(Options{Dir: dir, MasterSocket: filepath.Join(dir, "none.sock"), AdminSocket: filepath.Join(dir, "none2.sock")})
	if err != nil {
		t.Fatal(err)
	}
	files := []File{{Path: "haproxy.cfg", Content: []byte("global\n")}, {Path: "maps/a.map", Content: []byte("a b\n")}}
	res, err := d.Apply(t.Context(), files)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Apply: %v, want ErrUnreachable", err)
	}
	if res.ReloadReason != ReasonInitial || !slices.Equal(res.Written, []string{"haproxy.cfg", "maps/a.map"}) {
		t.Errorf("result %+v", res)
	}
	if _, err := d.Reloads(t.Context()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Reloads: %v, want ErrUnreachable", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m, _, err := readManifest(root)
	if err != nil || m.Pending != ReasonInitial || len(m.Files) != 2 {
		t.Errorf("manifest %+v, %v: want both files owned and the reload pending", m, err)
	}
}

func TestBadBundle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := New(Options{Dir: dir, MasterSocket: filepath.Join(dir, "m.sock")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		files []File
		want  error
	}{
		{[]File{{Path: "maps/a.map"}}, ErrConfig},
		{[]File{{Path: "haproxy.cfg"}, {Path: "../x"}}, ErrBadPath},
		{[]File{{Path: "haproxy.cfg"}, {Path: "/etc/x"}}, ErrBadPath},
		{[]File{{Path: "haproxy.cfg"}, {Path: manifestName}}, ErrBadPath},
		{[]File{{Path: "haproxy.cfg"}, {Path: "maps/" + tmpPrefix + "x"}}, ErrBadPath},
		{[]File{{Path: "haproxy.cfg"}, {Path: "a"}, {Path: "a/b"}}, ErrBadPath},
		{[]File{{Path: "haproxy.cfg"}, {Path: "haproxy.cfg"}}, ErrBadPath},
	} {
		if _, err := d.Apply(t.Context(), tc.files); !errors.Is(err, tc.want) {
			t.Errorf("Apply(%v) = %v, want %v", tc.files, err, tc.want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("Dir has %v after refused bundles (%v)", entries, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "files", "x.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, files := range [][]File{
		{{Path: "haproxy.cfg"}, {Path: "files/x.txt"}},
		{{Path: "haproxy.cfg"}, {Path: "maps/a.map"}},
	} {
		if _, err := d.Apply(t.Context(), files); !errors.Is(err, ErrConflict) {
			t.Errorf("Apply(%v) = %v, want ErrConflict", files, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "haproxy.cfg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("haproxy.cfg written despite a conflict: %v", err)
	}
	for _, o := range []Options{
		{MasterSocket: "m"},
		{Dir: dir},
		{Dir: dir, MasterSocket: "m", HAProxyDir: "relative"},
		{Dir: dir, MasterSocket: "m", Mode: 0o1644},
		{Dir: dir, MasterSocket: "m", DirMode: 0o555},
		{Dir: dir, MasterSocket: "m", Main: "../haproxy.cfg"},
		{Dir: dir, MasterSocket: "m", ReloadTimeout: -1},
	} {
		if _, err := New(o); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", o, err)
		}
	}
}

// TestRuntimeDrift: servers changed through the Runtime API behind the
// driver's back (an address, a weight, maintenance, drain) are set back by
// the next Apply of the same bundle, through the Runtime API and without
// a reload; the Apply after that has nothing to do.
func TestRuntimeDrift(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	bundle := r.bundle(baseSpec(r))
	want := r.running().servers
	cPort := r.echo["C"][strings.LastIndex(r.echo["C"], ":")+1:]
	for _, cmd := range []string{
		"set server be_app/SRV_1 addr 127.0.0.1 port " + cPort,
		"set server be_app/SRV_1 weight 77",
		"set server be_other/SRV_1 state maint",
		"set server be_default/SRV_1 state drain",
		"set server be_down/SRV_1 state ready",
	} {
		r.adminDo(cmd)
	}
	if got := r.get("app.example", "/"); got != "C" {
		t.Fatalf("app.example answered by %q after the address change, want C", got)
	}
	before := r.reloads()
	res := r.apply(bundle)
	if res.Reloaded || r.reloads() != before {
		t.Fatalf("Apply reloaded (%+v); want the servers set back through the Runtime API", res)
	}
	if len(res.RuntimeOps) != 5 {
		t.Errorf("RuntimeOps = %q, want five commands", res.RuntimeOps)
	}
	if got := r.running().servers; !slices.Equal(got, want) {
		t.Errorf("servers after the repair:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := r.get("app.example", "/"); got != "B" {
		t.Errorf("app.example answered by %q, want B", got)
	}
	if got := r.get("other.example", "/"); got != "C" {
		t.Errorf("other.example answered by %q, want C", got)
	}
	if res := r.apply(bundle); len(res.RuntimeOps) != 0 || res.Reloaded {
		t.Errorf("second Apply = %+v, want nothing to do", res)
	}
}
