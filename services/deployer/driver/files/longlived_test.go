//go:build linux

package files

import (
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/library/librarytest"
	"github.com/weftio/weft/pkg/testkit"
)

var longlivedDeploys = flag.Int("longlived.deploys", 50, "deploys in TestReloadCmdKeepsLongLivedConnections")

// TestReloadCmdKeepsLongLivedConnections delivers 50 bundles of the
// ingress library to an HAProxy in master-worker mode whose reload_cmd
// signals the master (SIGUSR2), while WebSocket connections are held
// through it: 100 from the start and one more before each deploy, so that
// every replaced worker holds some. Each bundle is rendered from an
// Ingress whose annotation sets another response header, and a Service
// whose EndpointSlice leaves one of the four WebSocket backends out (the
// others move to other server slots). After each reload every connection
// sends a message and must get its echo from the backend it was first
// routed to; the library's default hard_stop_after (1h) keeps the
// replaced workers serving them. It takes about 50s (-race, 2 busy
// cores); -longlived.deploys sets the deploys (50) for a longer run.
func TestReloadCmdKeepsLongLivedConnections(t *testing.T) {
	const conns = 100
	echoes := testkit.StartWSEchoes(t, 4)
	haproxyBin := testkit.HAProxy(t)
	dest := t.TempDir()
	port := testkit.FreePort(t)
	tc := config.Target{Library: "ingress", Base: dest, LibraryOptions: map[string]string{
		"bind_address": "127.0.0.1", "http_port": strconv.Itoa(port),
	}}
	scene := librarytest.NewScene(t, tc, librarytest.WatchedOf(t, "ingress"), wsObjects(t, echoes, nil, 0)...)
	render := func(out *testkit.WSEcho, deploy int) []File {
		scene.Sync(wsObjects(t, echoes, out, deploy)...)
		b := scene.Bundle()
		files := make([]File, len(b.Files))
		for i, f := range b.Files {
			files[i] = File{Path: f.Path, Content: f.Content, Secret: f.Secret()}
		}
		return files
	}

	ctx := t.Context()
	first := render(nil, 0)
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
		Main:      "haproxy.cfg",
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
		res, err := d.Apply(ctx, render(echoes[i%len(echoes)], i+1))
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

// wsObjects are the objects of TestReloadCmdKeepsLongLivedConnections for
// deploy: the Ingress apps/ws routing ws.example to the Service ws, with
// the response header X-Deploy <deploy>, and the Service's EndpointSlice
// with the addresses of echoes but out (none when nil).
func wsObjects(t testing.TB, echoes []*testkit.WSEcho, out *testkit.WSEcho, deploy int) []librarytest.Object {
	t.Helper()
	var addrs []string
	port := 0
	for _, e := range echoes {
		host, p, err := net.SplitHostPort(e.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			t.Fatal(err)
		}
		if e != out {
			addrs = append(addrs, host)
		}
	}
	return []librarytest.Object{
		librarytest.Service("apps", "ws", 80, port),
		librarytest.EndpointSlice("apps", "ws-1", "ws", port, addrs...),
		librarytest.Ingress("apps", "ws", map[string]string{"weft.io/response-set-header": fmt.Sprintf("X-Deploy %d", deploy)},
			librarytest.IngressRule{Host: "ws.example", Path: "/", Service: "ws", Port: 80}),
	}
}
