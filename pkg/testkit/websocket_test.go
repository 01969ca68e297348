package testkit

import (
	"context"
	"fmt"
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
