package testkit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// WSFleet holds WebSocket connections open through a proxy to WSEcho
// backends, and checks that each keeps answering from the backend that
// answered it first (a connection a reload or a deploy cut, or moved to
// another backend, is dropped). It is driven by one goroutine, the
// test's.
type WSFleet struct {
	t                testing.TB
	addr, host, path string
	held             []*wsHeld
}

// wsHeld is one held connection and the backend that answered it first.
type wsHeld struct {
	conn    *WSConn
	backend string
	dropped string // why it stopped answering, "" while it answers
}

// NewWSFleet is a fleet of connections to addr ("host:port"), upgraded
// with the Host header host on path; it holds none yet.
func NewWSFleet(t testing.TB, addr, host, path string) *WSFleet {
	return &WSFleet{t: t, addr: addr, host: host, path: path}
}

// Dial opens one more connection, which must be answered by a backend;
// it is closed at the end of the test.
func (f *WSFleet) Dial() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 10*time.Second)
	defer cancel()
	c, err := DialWS(ctx, f.addr, f.host, f.path)
	if err != nil {
		f.t.Fatalf("connection %d: %v", len(f.held), err)
	}
	f.t.Cleanup(func() { _ = c.Close() })
	got, err := c.Echo("hello", 10*time.Second)
	if err != nil {
		f.t.Fatalf("connection %d: %v", len(f.held), err)
	}
	name, _, _ := strings.Cut(got, ":")
	f.held = append(f.held, &wsHeld{conn: c, backend: name})
}

// Len is the number of connections opened.
func (f *WSFleet) Len() int { return len(f.held) }

// PerBackend is the number of connections each backend answered first.
func (f *WSFleet) PerBackend() map[string]int {
	n := map[string]int{}
	for _, h := range f.held {
		n[h.backend]++
	}
	return n
}

// Check makes every connection that still answers send a message, at
// once, and expect its echo from its backend within 10s; it returns the
// number of connections dropped so far. step names the moment in the
// reasons ReportDropped gives.
func (f *WSFleet) Check(step string) int {
	var wg sync.WaitGroup
	for i, h := range f.held {
		if h.dropped != "" {
			continue
		}
		wg.Go(func() {
			msg := fmt.Sprintf("%s #%d", step, i)
			got, err := h.conn.Echo(msg, 10*time.Second)
			switch {
			case err != nil:
				h.dropped = fmt.Sprintf("after %s: %v", step, err)
			case got != h.backend+":"+msg:
				h.dropped = fmt.Sprintf("after %s: answer %q, want %q", step, got, h.backend+":"+msg)
			}
		})
	}
	wg.Wait()
	n := 0
	for _, h := range f.held {
		if h.dropped != "" {
			n++
		}
	}
	return n
}

// ReportDropped fails the test with each dropped connection and why.
func (f *WSFleet) ReportDropped() {
	f.t.Helper()
	for i, h := range f.held {
		if h.dropped != "" {
			f.t.Errorf("connection %d to %s dropped %s", i, h.backend, h.dropped)
		}
	}
}

// CheckBackends fails the test unless every backend of echoes holds open
// exactly the connections it answered first.
func (f *WSFleet) CheckBackends(echoes []*WSEcho) {
	f.t.Helper()
	per := f.PerBackend()
	for _, e := range echoes {
		if e.Open() != per[e.Name] {
			f.t.Errorf("backend %s holds %d connections, want %d", e.Name, e.Open(), per[e.Name])
		}
	}
}
