//go:build linux

package files

import (
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
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
	port := testkit.FreePort(t)
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

	ws := testkit.NewWSFleet(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "ws.example", "/chat")
	for range conns {
		ws.Dial()
	}

	for i := range *longlivedDeploys {
		ws.Dial()
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
		if n := ws.Check(fmt.Sprintf("deploy %d", i)); n != 0 {
			ws.ReportDropped()
			t.Fatalf("%d of %d connections dropped by reload_cmd deploys", n, ws.Len())
		}
	}
	ws.CheckBackends(echoes)
}
