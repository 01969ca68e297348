package renderer

import (
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// TestPendingRequestMerges: asks made before the loop takes a target's
// request are one request: forced if any was, carrying the last trigger,
// and with a trigger's cause kept over later changes'.
func TestPendingRequestMerges(t *testing.T) {
	trig := &msg.Trigger{Reason: "test"}
	tests := []struct {
		name      string
		asks      []request
		wantCause string
		wantForce bool
		wantTrig  bool
	}{
		{"one change", []request{{cause: "weft.change.m.services"}}, "weft.change.m.services", false, false},
		{"changes", []request{{cause: "a"}, {cause: "b"}}, "b", false, false},
		{"trigger then change", []request{{cause: "trigger", force: true, trigger: trig}, {cause: "a"}}, "trigger", true, true},
		{"change then trigger", []request{{cause: "a"}, {cause: "trigger", force: true, trigger: trig}}, "trigger", true, true},
		{"retry then change", []request{{cause: "a", force: true}, {cause: "b"}}, "b", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := &targetState{name: "edge", leased: true}
			for i, req := range tt.asks {
				if first := ts.want(req); first != (i == 0) {
					t.Fatalf("ask %d: first = %v", i, first)
				}
			}
			req, ok := ts.next()
			if !ok || req.target != "edge" || req.cause != tt.wantCause || req.force != tt.wantForce || (req.trigger != nil) != tt.wantTrig {
				t.Fatalf("next = %+v %v; want cause %q force %v trigger %v", req, ok, tt.wantCause, tt.wantForce, tt.wantTrig)
			}
			if _, ok := ts.next(); ok {
				t.Fatal("a second request after one was taken")
			}
		})
	}
	ts := &targetState{name: "edge"}
	ts.want(request{cause: "a"})
	if _, ok := ts.next(); ok {
		t.Error("a request rendered without the lease")
	}
	if !ts.leaseChanged(true) {
		t.Error("a lease gain asked for no render")
	}
	if req, ok := ts.next(); !ok || req.cause != "lease" {
		t.Errorf("after the gain: %+v %v", req, ok)
	}
}
