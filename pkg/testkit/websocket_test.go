package testkit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestWSEcho(t *testing.T) {
	e := StartWSEcho(t, "W1")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := DialWS(ctx, e.Addr, "ws.example", "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"hello", "", strings.Repeat("x", 300), strings.Repeat("y", 70000/2)} {
		got, err := c.Echo(msg, 5*time.Second)
		if err != nil || got != "W1:"+msg {
			t.Fatalf("Echo(%d bytes) = %.40q, %v; want W1:%.40q", len(msg), got, err, msg)
		}
	}
	Eventually(t, 10*time.Second, func() error {
		if e.Open() != 1 {
			return fmt.Errorf("open = %d, want 1", e.Open())
		}
		return nil
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() error {
		if e.Open() != 0 || e.Ended() != 1 {
			return fmt.Errorf("open = %d, ended = %d; want 0 and 1", e.Open(), e.Ended())
		}
		return nil
	})
	// A request that does not upgrade is refused.
	resp, err := http.Get("http://" + e.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain GET: status %d, want 400", resp.StatusCode)
	}
}

// TestWSEchoes starts backends that share a port on their own loopback
// addresses, each answering with its own name.
func TestWSEchoes(t *testing.T) {
	echoes := StartWSEchoes(t, 3)
	port := ""
	for i, e := range echoes {
		host, p, err := net.SplitHostPort(e.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("127.0.0.%d", i+2); host != want || e.Name != fmt.Sprintf("W%d", i+1) {
			t.Errorf("backend %d: %s at %s, want W%d at %s", i, e.Name, e.Addr, i+1, want)
		}
		if port != "" && p != port {
			t.Errorf("backend %s on port %s, the first on %s", e.Name, p, port)
		}
		port = p
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		c, err := DialWS(ctx, e.Addr, "ws.example", "/")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Echo("hi", 5*time.Second); err != nil || got != e.Name+":hi" {
			t.Errorf("%s answered %q, %v", e.Name, got, err)
		}
		_ = c.Close()
	}
}
