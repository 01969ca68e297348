package testkit

// A small real WebSocket (RFC 6455) echo backend and client, for tests
// that hold upgraded connections open through a proxy: the handshake,
// masked client frames, unmasked server frames, ping/pong and close. Text
// messages up to 64 KiB; no extensions, no fragmentation.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// WebSocket opcodes.
const (
	wsText  = 0x1
	wsClose = 0x8
	wsPing  = 0x9
	wsPong  = 0xA
)

// wsMaxPayload bounds a frame's payload.
const wsMaxPayload = 64 << 10

// WSEcho is a WebSocket echo backend on 127.0.0.1: each text message is
// answered with "<Name>:<message>", so a client sees which backend holds
// its connection.
type WSEcho struct {
	Name string
	// Addr is the backend's "127.0.0.1:port".
	Addr string
	srv  *http.Server
	open atomic.Int64
	// ended counts connections that ended, by the client's close or not.
	ended atomic.Int64
}

// StartWSEcho starts a WebSocket echo backend; it stops at the end of the
// test.
func StartWSEcho(tb testing.TB, name string) *WSEcho {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("websocket backend %s: %v", name, err)
	}
	return serveWSEcho(tb, name, ln)
}

// StartWSEchoes starts n WebSocket echo backends named W1, W2, ... on the
// loopback addresses 127.0.0.2, 127.0.0.3, ... and one port, as the
// endpoints of a Service are Pods with addresses of their own and the same
// target port; they stop at the end of the test.
func StartWSEchoes(tb testing.TB, n int) []*WSEcho {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		lns, err := listenLoopbacks(n)
		if err == nil {
			echoes := make([]*WSEcho, n)
			for i, ln := range lns {
				echoes[i] = serveWSEcho(tb, fmt.Sprintf("W%d", i+1), ln)
			}
			return echoes
		}
		if attempt == 5 {
			tb.Fatalf("websocket backends: %v", err)
		}
	}
}

// listenLoopbacks listens on 127.0.0.2, ..., 127.0.0.<n+1> and one port,
// the one the first address got; when another process holds that port on
// one of the others, it closes them all and fails.
func listenLoopbacks(n int) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, n)
	port := "0"
	for i := range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i+2), port))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		lns = append(lns, ln)
	}
	return lns, nil
}

// serveWSEcho serves a WebSocket echo backend named name on ln until the
// test ends.
func serveWSEcho(tb testing.TB, name string, ln net.Listener) *WSEcho {
	e := &WSEcho{Name: name, Addr: ln.Addr().String()}
	var wg sync.WaitGroup
	conns := map[net.Conn]struct{}{}
	var mu sync.Mutex
	closed := false // set once the backend stops; guarded by mu
	e.srv = &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, rw, err := wsAccept(w, r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = conn.Close()
				return
			}
			conns[conn] = struct{}{}
			wg.Add(1)
			mu.Unlock()
			e.open.Add(1)
			defer func() {
				e.open.Add(-1)
				e.ended.Add(1)
				mu.Lock()
				delete(conns, conn)
				mu.Unlock()
				_ = conn.Close()
				wg.Done()
			}()
			e.serve(rw)
		}),
	}
	go func() { _ = e.srv.Serve(ln) }()
	tb.Cleanup(func() {
		_ = e.srv.Close() // does not close hijacked connections
		mu.Lock()
		closed = true
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

// Open is the number of WebSocket connections the backend holds.
func (e *WSEcho) Open() int { return int(e.open.Load()) }

// Ended is the number of WebSocket connections that ended.
func (e *WSEcho) Ended() int { return int(e.ended.Load()) }

func (e *WSEcho) serve(rw *bufio.ReadWriter) {
	for {
		op, payload, err := wsReadFrame(rw.Reader, true)
		if err != nil {
			return
		}
		switch op {
		case wsText:
			payload = append([]byte(e.Name+":"), payload...)
			if wsWriteFrame(rw.Writer, wsText, payload, false) != nil {
				return
			}
		case wsPing:
			if wsWriteFrame(rw.Writer, wsPong, payload, false) != nil {
				return
			}
		case wsClose:
			_ = wsWriteFrame(rw.Writer, wsClose, payload, false)
			return
		}
	}
}

// wsAccept checks an upgrade request, answers 101 and hijacks the
// connection.
func wsAccept(w http.ResponseWriter, r *http.Request) (net.Conn, *bufio.ReadWriter, error) {
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return nil, nil, errors.New("not a websocket upgrade")
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if key == "" || r.Header.Get("Sec-WebSocket-Version") != "13" {
		return nil, nil, errors.New("missing Sec-WebSocket-Key or version 13")
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", wsAcceptKey(key))
	if err := rw.Flush(); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, rw, nil
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func wsAcceptKey(key string) string {
	sum := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// wsReadFrame reads one frame; masked tells whether the peer must mask it
// (a client's frames are masked, a server's are not).
func wsReadFrame(r *bufio.Reader, masked bool) (byte, []byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	if hdr[0]&0x80 == 0 {
		return 0, nil, errors.New("websocket: fragmented frames are not supported")
	}
	op := hdr[0] & 0x0F
	if (hdr[1]&0x80 != 0) != masked {
		return 0, nil, fmt.Errorf("websocket: frame mask bit is %v, want %v", hdr[1]&0x80 != 0, masked)
	}
	n := uint64(hdr[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > wsMaxPayload {
		return 0, nil, fmt.Errorf("websocket: frame of %d bytes is too large", n)
	}
	var mask [4]byte
	if masked {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return op, payload, nil
}

// wsWriteFrame writes one final frame and flushes it; a client masks it.
func wsWriteFrame(w *bufio.Writer, op byte, payload []byte, mask bool) error {
	if len(payload) > wsMaxPayload {
		return fmt.Errorf("websocket: frame of %d bytes is too large", len(payload))
	}
	hdr := []byte{0x80 | op, 0}
	switch n := len(payload); {
	case n < 126:
		hdr[1] = byte(n)
	default:
		hdr[1] = 126
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	}
	body := payload
	if mask {
		hdr[1] |= 0x80
		var key [4]byte
		_, _ = rand.Read(key[:])
		hdr = append(hdr, key[:]...)
		body = make([]byte, len(payload))
		for i := range payload {
			body[i] = payload[i] ^ key[i%4]
		}
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.Flush()
}

// WSConn is a client WebSocket connection.
type WSConn struct {
	conn net.Conn
	rw   *bufio.ReadWriter
}

// DialWS opens a WebSocket connection to ws://addr/path with the given Host
// header.
func DialWS(ctx context.Context, addr, host, path string) (*WSConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("websocket dial %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var k [16]byte
	_, _ = rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	fmt.Fprintf(rw, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, host, key)
	if err := rw.Flush(); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("websocket handshake with %s: %w", addr, err)
	}
	resp, err := http.ReadResponse(rw.Reader, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("websocket handshake with %s: %w", addr, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAcceptKey(key) {
		_ = conn.Close()
		return nil, fmt.Errorf("websocket handshake with %s: status %s, accept %q", addr, resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
	}
	_ = conn.SetDeadline(time.Time{})
	return &WSConn{conn: conn, rw: rw}, nil
}

// Echo sends msg and returns the backend's answer ("<name>:<msg>"), within
// timeout. Pongs received meanwhile are skipped.
func (c *WSConn) Echo(msg string, timeout time.Duration) (string, error) {
	_ = c.conn.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.conn.SetDeadline(time.Time{}) }()
	if err := wsWriteFrame(c.rw.Writer, wsText, []byte(msg), true); err != nil {
		return "", fmt.Errorf("websocket send: %w", err)
	}
	for {
		op, payload, err := wsReadFrame(c.rw.Reader, false)
		if err != nil {
			return "", fmt.Errorf("websocket receive: %w", err)
		}
		switch op {
		case wsText:
			return string(payload), nil
		case wsClose:
			return "", fmt.Errorf("websocket receive: closed by the peer (%q)", payload)
		}
	}
}

// Close sends a close frame, waits briefly for the answer and closes the
// connection.
func (c *WSConn) Close() error {
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := wsWriteFrame(c.rw.Writer, wsClose, []byte{0x03, 0xE8}, true); err == nil {
		for {
			op, _, err := wsReadFrame(c.rw.Reader, false)
			if err != nil || op == wsClose {
				break
			}
		}
	}
	return c.conn.Close()
}
