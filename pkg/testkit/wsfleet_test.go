package testkit

import (
	"maps"
	"strings"
	"testing"
)

// TestWSFleet holds connections to one echo backend directly: they answer
// from it, and one closed under the fleet is counted as dropped from then
// on, with the step it was found at.
func TestWSFleet(t *testing.T) {
	e := StartWSEcho(t, "W1")
	f := NewWSFleet(t, e.Addr, "ws.example", "/")
	for range 3 {
		f.Dial()
	}
	if got := f.PerBackend(); !maps.Equal(got, map[string]int{"W1": 3}) || f.Len() != 3 {
		t.Fatalf("per backend %v, %d connections; want W1: 3", got, f.Len())
	}
	if n := f.Check("first"); n != 0 {
		t.Fatalf("%d dropped, want none", n)
	}
	f.CheckBackends([]*WSEcho{e})
	if err := f.held[1].conn.Close(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"second", "third"} {
		if n := f.Check(step); n != 1 {
			t.Fatalf("after %s: %d dropped, want 1", step, n)
		}
	}
	if d := f.held[1].dropped; !strings.HasPrefix(d, "after second: ") {
		t.Errorf("dropped %q, want the step it was found at", d)
	}
}
