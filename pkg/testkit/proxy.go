package testkit

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards connections from a loopback port to a target address,
// and can cut the link (every connection closed, new ones refused) and
// restore it: a network partition between two processes, as a test makes
// one between a NATS leaf node and its hub.
type TCPProxy struct {
	Addr   string // 127.0.0.1:<port>, to dial instead of the target
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// Proxy starts a TCPProxy to target, stopped when the test ends.
func Proxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		wg.Wait()
	})
	return p
}

func (p *TCPProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *TCPProxy) serve(c net.Conn) {
	if !p.track(c) {
		_ = c.Close()
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(u) {
		p.close(c)
		if u != nil {
			_ = u.Close()
		}
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		p.close(dst)
		p.close(src)
	}
	wg.Go(func() { pipe(u, c) })
	wg.Go(func() { pipe(c, u) })
	wg.Wait()
}

// track adds c to the open connections, unless the link is cut.
func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *TCPProxy) close(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// Cut closes every connection and refuses new ones until Restore.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Restore lets connections through again.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}
