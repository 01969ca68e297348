//go:build linux

package files

import (
	"context"
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

var longlivedDeploys = flag.Int("longlived.deploys", 50, "deploys in TestReloadCmdKeepsLongLivedConnections")

// TestReloadCmdKeepsLongLivedConnections delivers 50 configurations to an
// HAProxy in master-worker mode whose reload_cmd signals the master
// (SIGUSR2), while WebSocket connections are held through it: 100 from the
// start and one more before each deploy, so that every replaced worker
// holds some. Each configuration leaves one WebSocket backend out (the
// others move to other server lines). After each reload every connection
// sends a message and must get its echo from the backend it was first
// routed to.
func TestReloadCmdKeepsLongLivedConnections(t *testing.T) {
	const conns = 100
	echoes := make([]*testkit.WSEcho, 4)
	for i := range echoes {
		echoes[i] = testkit.StartWSEcho(t, "W"+strconv.Itoa(i+1))
	}
	haproxyBin := testkit.HAProxy(t)
	dest := t.TempDir()
	port := freeLoopbackPort(t)
	config := func(out *testkit.WSEcho, deploy int) []File {
		var b strings.Builder
		fmt.Fprintf(&b, `global
    hard-stop-after 1h

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout tunnel 1h

frontend web
    bind 127.0.0.1:%d
    default_backend be_ws

backend be_ws
    balance roundrobin
    http-response set-header X-Deploy %d
`, port, deploy)
		var addrs []string
		for _, e := range echoes {
			if e != out {
				addrs = append(addrs, e.Addr)
			}
		}
		slices.Sort(addrs)
		for i, a := range addrs {
			fmt.Fprintf(&b, "    server SRV_%d %s\n", i+1, a)
		}
		return []File{{Path: "haproxy.cfg", Content: []byte(b.String())}}
	}

	ctx := t.Context()
	first := config(nil, 0)
	bootstrap, err := New(Options{Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bootstrap.Apply(ctx, first); err != nil {
		t.Fatal(err)
	}
	h := testkit.StartHAProxyMW(t, dest+"/haproxy.cfg", t.TempDir()+"/master.sock")
	d, err := New(Options{
		Dest:      dest,
		CheckCmd:  haproxyBin + " -c -q -f {{.src}}",
		ReloadCmd: "kill -USR2 " + strconv.Itoa(h.Pid()),
	})
	if err != nil {
		t.Fatal(err)
	}

	type client struct {
		conn    *testkit.WSConn
		backend string
		dropped string
	}
	var clients []*client
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	dial := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := testkit.DialWS(ctx, addr, "ws.example", "/chat")
		if err != nil {
			t.Fatalf("connection %d: %v", len(clients), err)
		}
		t.Cleanup(func() { _ = c.Close() })
		got, err := c.Echo("hello", 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(clients), err)
		}
		name, _, _ := strings.Cut(got, ":")
		clients = append(clients, &client{conn: c, backend: name})
	}
	for range conns {
		dial()
	}
	check := func(step string) int {
		var wg sync.WaitGroup
		for i, c := range clients {
			if c.dropped != "" {
				continue
			}
			wg.Go(func() {
				msg := fmt.Sprintf("%s #%d", step, i)
				got, err := c.conn.Echo(msg, 10*time.Second)
				switch {
				case err != nil:
					c.dropped = fmt.Sprintf("after %s: %v", step, err)
				case got != c.backend+":"+msg:
					c.dropped = fmt.Sprintf("after %s: answer %q, want %q", step, got, c.backend+":"+msg)
				}
			})
		}
		wg.Wait()
		n := 0
		for _, c := range clients {
			if c.dropped != "" {
				n++
			}
		}
		return n
	}

	for i := range *longlivedDeploys {
		dial()
		before, err := h.Proc(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.Apply(ctx, config(echoes[i%len(echoes)], i+1))
		if err != nil || !res.Reloaded {
			t.Fatalf("deploy %d: %+v, %v", i, res, err)
		}
		// The master answers the signal by itself: wait until a new
		// worker replaced the previous one.
		testkit.Eventually(t, 30*time.Second, func() error {
			p, err := h.Proc(ctx)
			switch {
			case err != nil:
				return err
			case p.Reloads != before.Reloads+1 || len(p.Workers) != 1 || slices.Contains(before.Workers, p.Workers[0]):
				return fmt.Errorf("show proc %+v, want reload %d and a new worker (before %+v)", p, before.Reloads+1, before)
			}
			return nil
		})
		if n := check(fmt.Sprintf("deploy %d", i)); n != 0 {
			for j, c := range clients {
				if c.dropped != "" {
					t.Errorf("connection %d to %s dropped %s", j, c.backend, c.dropped)
				}
			}
			t.Fatalf("%d of %d connections dropped by reload_cmd deploys", n, len(clients))
		}
	}
	perBackend := map[string]int{}
	for _, c := range clients {
		perBackend[c.backend]++
	}
	for _, e := range echoes {
		if e.Open() != perBackend[e.Name] {
			t.Errorf("backend %s holds %d connections, want %d", e.Name, e.Open(), perBackend[e.Name])
		}
	}
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
