//go:build linux

package runtime

import (
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

// TestRemovedEndpointDrains removes an endpoint that holds WebSocket
// connections from the Service of an Ingress, a runtime-only deploy, and
// checks through the Runtime API that it cut none: every slot of the
// backend still counts the connections it held (show stat), the slot the
// endpoints no longer fill is in maintenance (show servers state) with
// its connections, and every held connection still echoes from its
// backend, while new connections no longer reach the endpoint that left.
// Either the endpoint in the last slot leaves (its slot goes to
// maintenance), or the one in the first (the slots after it are
// readdressed, and the last goes to maintenance with the connections of
// the endpoint that moved out of it).
func TestRemovedEndpointDrains(t *testing.T) {
	cases := []struct {
		name   string
		leaves int // the index of the endpoint that leaves, in slot order
	}{
		{"the last endpoint leaves", 3},
		{"the first endpoint leaves", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			echoes := testkit.StartWSEchoes(t, 4) // in address order, as the slots
			st := newWSState(t, echoes, startHTTPBackend(t))
			r := newIngressRig(t, nil, st.objects(t)...)
			ws := r.wsFleet(20)
			per := ws.PerBackend()
			before := r.slots(wsBackend)
			for i, e := range echoes {
				if s := before[slotName(i+1)]; s != (slotState{addr: e.Addr, sessions: per[e.Name]}) || s.sessions == 0 {
					t.Fatalf("before: %s: %+v, want %s with its %d connections", slotName(i+1), s, e.Addr, per[e.Name])
				}
			}

			gone := echoes[c.leaves]
			st.up = without(echoes, gone)
			endpointsKind.check(t, "the removal", r.deploy(st.objects(t)...))
			after := r.slots(wsBackend)
			for i := range echoes {
				name := slotName(i + 1)
				want := slotState{addr: "127.0.0.1:1", maint: true, sessions: before[name].sessions}
				if i < len(st.up) {
					want.addr, want.maint = st.up[i].Addr, false
				}
				if after[name] != want {
					t.Errorf("after: %s: %+v, want %+v", name, after[name], want)
				}
			}
			if n := ws.Check("the removal"); n != 0 {
				ws.ReportDropped()
				t.Fatalf("%d of %d connections dropped", n, ws.Len())
			}
			ws.CheckBackends(echoes)
			if got := r.wsFleet(8).PerBackend()[gone.Name]; got != 0 {
				t.Errorf("%d new connections reached %s, which left", got, gone.Name)
			}
		})
	}
}
