//go:build linux

package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// TestHardStopAfterBoundsReplacedWorker reloads an HAProxy that runs the
// ingress library's bundle (tunnel_timeout 1h) while WebSocket
// connections are held through it. The replaced worker keeps serving
// them after the reload (they echo; "show proc" lists it among the old
// workers) until hard_stop_after: with a short bound (3s) it then closes
// them, not before the bound, and leaves; with the default (1h) they
// still echo after the short bound has passed. New connections reach the
// new worker either way. It takes about 10s.
func TestHardStopAfterBoundsReplacedWorker(t *testing.T) {
	const short = 3 * time.Second
	cases := []struct {
		name          string
		hardStopAfter string
		closes        bool
	}{
		{"short bound", fmt.Sprint(short.Seconds()), true},
		{"long bound", "3600", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			echoes := testkit.StartWSEchoes(t, 2)
			st := newWSState(t, echoes, startHTTPBackend(t))
			r := newIngressRig(t, map[string]string{"hard_stop_after": c.hardStopAfter, "tunnel_timeout": "3600"}, st.objects(t)...)
			ws := r.wsFleet(10)
			replaced := r.proc().workers

			st = reloadKind.change(st, 0, echoes)
			start := time.Now()
			reloadKind.check(t, "the reload", r.deploy(st.objects(t)...))
			if n := ws.Check("the reload"); n != 0 {
				ws.ReportDropped()
				t.Fatalf("%d of %d connections dropped by the reload", n, ws.Len())
			}
			if old := r.proc().old; !slices.Equal(old, replaced) {
				t.Fatalf("old workers %v after the reload, want the replaced %v", old, replaced)
			}
			if c.closes {
				waitAllClosed(t, ws, start, short)
				testkit.Eventually(t, 10*time.Second, func() error {
					if old := r.proc().old; len(old) != 0 {
						return fmt.Errorf("old workers %v still run", old)
					}
					return nil
				})
				for _, e := range echoes {
					testkit.Eventually(t, 10*time.Second, func() error {
						if e.Open() != 0 {
							return fmt.Errorf("backend %s still holds %d connections", e.Name, e.Open())
						}
						return nil
					})
				}
			} else {
				time.Sleep(time.Until(start.Add(short + 2*time.Second)))
				if n := ws.Check("the short bound"); n != 0 {
					ws.ReportDropped()
					t.Fatalf("%d of %d connections dropped past the short bound", n, ws.Len())
				}
				if old := r.proc().old; !slices.Equal(old, replaced) {
					t.Fatalf("old workers %v past the short bound, want the replaced %v", old, replaced)
				}
			}
			if n := r.wsFleet(4).Check("new connections"); n != 0 {
				t.Fatalf("%d new connections dropped", n)
			}
		})
	}
}

// waitAllClosed checks ws every 200ms until none of its connections
// answers any more, which must happen after bound has passed since start
// and within 15s after that.
func waitAllClosed(t *testing.T, ws *testkit.WSFleet, start time.Time, bound time.Duration) {
	t.Helper()
	for i := 0; ; i++ {
		n := ws.Check(fmt.Sprintf("check %d after the reload", i))
		elapsed := time.Since(start)
		switch {
		case n > 0 && elapsed < bound:
			ws.ReportDropped()
			t.Fatalf("%d connections closed %v after the reload began, before the bound %v", n, elapsed, bound)
		case n == ws.Len():
			return
		case elapsed > bound+15*time.Second:
			t.Fatalf("%v after the reload began, %d of %d connections still answer", elapsed, ws.Len()-n, ws.Len())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTunnelTimeoutClosesIdleTunnels runs the ingress library's bundle
// with tunnel_timeout 2s: of the WebSocket connections held, those that
// send a message every 200ms still echo after 5s, while those left idle
// meanwhile have been closed. It takes about 6s.
func TestTunnelTimeoutClosesIdleTunnels(t *testing.T) {
	echoes := testkit.StartWSEchoes(t, 2)
	st := newWSState(t, echoes, startHTTPBackend(t))
	r := newIngressRig(t, map[string]string{"tunnel_timeout": "2"}, st.objects(t)...)
	idle, active := r.wsFleet(5), r.wsFleet(5)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if n := active.Check("activity"); n != 0 {
			active.ReportDropped()
			t.Fatalf("%d of %d active connections dropped", n, active.Len())
		}
	}
	if n := idle.Check("5s idle"); n != idle.Len() {
		t.Fatalf("%d of %d connections idle for 5s closed, want all (timeout tunnel 2s)", n, idle.Len())
	}
}
