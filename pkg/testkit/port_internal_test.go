package testkit

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsAreDistinct asks for more ports than the range below the
// kernel's ephemeral range gives without a repeat by chance: each is new to
// the process and can be bound.
func TestFreePortsAreDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		_ = l.Close()
	}
}
