package embedded

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestStartOnATakenAddress: a server whose address is taken fails with
// the listener's error, not with a timeout.
func TestStartOnATakenAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s, err := Start(Options{Port: port, StoreDir: t.TempDir()})
	if err == nil {
		s.Shutdown()
		t.Fatal("started on a taken address")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("err %v, want EADDRINUSE naming %s", err, l.Addr())
	}
}

func TestStartOnAFreeAddress(t *testing.T) {
	s, err := Start(Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream is not enabled")
	}
}
