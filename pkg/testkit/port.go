package testkit

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// below the kernel's ephemeral range where it can, and never one this
// process was given before.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// handedOut holds every port freePort returned in this process. A port is
// closed again as soon as it is chosen, so without it two calls for one
// program (its client and its cluster port) may get the same port, and the
// program fails to bind the second.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a port free on 127.0.0.1 for a program the test starts
// later. It is taken below the kernel's ephemeral range where it can: a port
// the kernel handed out (127.0.0.1:0) may be handed out again, to any
// outgoing connection, before the program binds it, while a port below the
// range is only ever taken by a listener that names it.
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if lo, ok := ephemeralLow(); ok && lo > 11000 {
		for range 50 {
			port := 10000 + rand.IntN(lo-10000)
			if handedOut.ports[port] {
				continue
			}
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				_ = l.Close()
				handedOut.ports[port] = true
				return port, nil
			}
		}
	}
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port: 50 tries gave ports handed out before")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux).
func ephemeralLow() (int, bool) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(data), &lo, &hi); err != nil {
		return 0, false
	}
	return lo, true
}

// FreeAddr is FreePort as an address on 127.0.0.1, for a program's
// --listen flag.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
