//go:build linux

package runtime

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

var longlivedDeploys = flag.Int("longlived.deploys", 50, "deploys of each kind in TestLongLivedConnectionsSurviveDeploys")

// wsSlots lays the active WebSocket backends out in a backend's slots the
// way the ingress library does: sorted addresses in SRV_1, SRV_2, ..., the
// rest "127.0.0.1:1 disabled". A backend leaving shifts the ones after it
// to other slots, so slots are reused for other addresses while
// connections to their previous address are open.
func wsSlots(active []*testkit.WSEcho, slots, weight int, extra ...string) []string {
	addrs := make([]string, 0, len(active))
	for _, e := range active {
		addrs = append(addrs, e.Addr)
	}
	slices.Sort(addrs)
	lines := append([]string{"balance roundrobin"}, extra...)
	for i := range slots {
		if i < len(addrs) {
			lines = append(lines, fmt.Sprintf("server SRV_%d %s weight %d", i+1, addrs[i], weight))
		} else {
			lines = append(lines, fmt.Sprintf("server SRV_%d 127.0.0.1:1 disabled", i+1))
		}
	}
	return lines
}

// TestLongLivedConnectionsSurviveDeploys holds 100 WebSocket connections
// through HAProxy while the driver delivers deploys of each kind: runtime
// changes of the WebSocket backend's servers (addresses shifted between
// slots, a server removed into a disabled slot, weights), map entries, and
// changes that need a reload, either for their structure or as the
// fallback of a runtime command HAProxy refuses. Before each reload one
// more connection is opened, so that every replaced worker holds some.
// After every deploy each connection sends a message and must get its echo
// from the backend it was first routed to: none may be dropped, including
// those whose server left the configuration. -longlived.deploys sets the
// deploys of each kind (50) for a longer run.
func TestLongLivedConnectionsSurviveDeploys(t *testing.T) {
	const conns, slots = 100, 4
	echoes := make([]*testkit.WSEcho, 4)
	for i := range echoes {
		echoes[i] = testkit.StartWSEcho(t, "W"+strconv.Itoa(i+1))
	}
	wsSpec := func(s spec, active []*testkit.WSEcho, weight int, extra ...string) spec {
		s = s.clone()
		s.backends = append(s.backends, backendSpec{name: "be_ws", lines: wsSlots(active, slots, weight, extra...)})
		s.hostMap += "ws.example be_ws\n"
		s.global = []string{"hard-stop-after 1h"}
		s.defaults = []string{"timeout tunnel 1h"}
		return s
	}
	var base spec
	r := newRig(t, func(r *rig) spec {
		base = baseSpec(r)
		return wsSpec(base, echoes, 1)
	})

	ws := testkit.NewWSFleet(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(r.httpPort)), "ws.example", "/chat")
	for range conns {
		ws.Dial()
	}
	perBackend := ws.PerBackend()
	for _, e := range echoes {
		if perBackend[e.Name] == 0 {
			t.Fatalf("connections per backend %v: %s has none, so its removal would test nothing", perBackend, e.Name)
		}
	}

	// Keep-alive HTTP clients, one connection each: runtime and map
	// deploys leave their connection open; a reload closes an idle one
	// (the previous worker stops), which the client replaces without
	// failing a request.
	keepAlive := make([]*keepAliveClient, 10)
	for i := range keepAlive {
		keepAlive[i] = newKeepAliveClient(t, fmt.Sprintf("http://127.0.0.1:%d/", r.httpPort), "app.example")
		keepAlive[i].get(t, "start")
	}
	if n := ws.Check("start"); n != 0 {
		t.Fatalf("%d connections dropped before any deploy", n)
	}

	removed := map[string]bool{} // backends that left the configuration
	reloadsBefore := r.reloads()
	for _, kind := range []string{"runtime", "map", "reload"} {
		for i := range *longlivedDeploys {
			var s spec
			switch kind {
			case "runtime":
				// One backend leaves (the others shift slots), weights
				// change.
				out := echoes[i%len(echoes)]
				removed[out.Name] = true
				active := slices.DeleteFunc(slices.Clone(echoes), func(e *testkit.WSEcho) bool { return e == out })
				s = wsSpec(base, active, 1+i%3)
			case "map":
				s = wsSpec(base, echoes, 1)
				s.hostMap += fmt.Sprintf("ws-%d.example be_ws\n", i)
			case "reload":
				// The worker about to be replaced holds a connection
				// too, as it does when clients keep connecting.
				ws.Dial()
				// Even deploys change the structure; odd ones only a
				// weight that HAProxy refuses to change at runtime
				// (be_static balances with a static algorithm), so
				// the runtime path falls back to a reload.
				s = wsSpec(base, echoes, 1, fmt.Sprintf("http-response set-header X-Deploy %d", i-i%2))
				if i%2 == 1 {
					s.backend("be_static").lines[1] += "0"
				}
			}
			res := r.apply(r.bundle(s))
			wantReason := map[string]string{"reload": ReasonStructure}[kind]
			if kind == "reload" && i%2 == 1 {
				wantReason = ReasonRuntimeFailed
			}
			switch {
			case res.Reloaded != (wantReason != "") || res.ReloadReason != wantReason:
				t.Fatalf("%s deploy %d: reloaded %v (reason %q: %s), want reason %q", kind, i, res.Reloaded, res.ReloadReason, res.ReloadDetail, wantReason)
			case wantReason == "" && len(res.RuntimeOps) == 0:
				t.Fatalf("%s deploy %d: no runtime commands", kind, i)
			}
			step := fmt.Sprintf("%s deploy %d", kind, i)
			for j, c := range keepAlive {
				if local := c.get(t, step); kind != "reload" && local != c.first {
					t.Fatalf("keep-alive client %d: after %s its connection is from %s, was %s: the connection was closed", j, step, local, c.first)
				}
			}
			if n := ws.Check(step); n != 0 {
				ws.ReportDropped()
				t.Fatalf("%d of %d connections dropped by %s deploys (ops %v)", n, ws.Len(), kind, res.RuntimeOps)
			}
		}
	}
	if got := r.reloads() - reloadsBefore; got != *longlivedDeploys {
		t.Errorf("%d reloads, want %d", got, *longlivedDeploys)
	}
	if len(removed) != len(echoes) {
		t.Errorf("backends removed at some point: %v, want all %d", removed, len(echoes))
	}
	ws.CheckBackends(echoes)
	// New connections reach the current configuration.
	ws.Dial()
}

// keepAliveClient sends requests over one keep-alive connection at a time.
type keepAliveClient struct {
	client    *http.Client
	url, host string
	// first is the local address of the connection of the first request.
	first string
}

func newKeepAliveClient(t *testing.T, url, host string) *keepAliveClient {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	return &keepAliveClient{client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, url: url, host: host}
}

// get sends a request that must succeed, and returns the local address of
// the connection that carried it.
func (c *keepAliveClient) get(t *testing.T, step string) string {
	t.Helper()
	var local string
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { local = info.Conn.LocalAddr().String() },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = c.host
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("keep-alive request after %s: %v", step, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive request after %s: status %d, %v", step, resp.StatusCode, err)
	}
	if c.first == "" {
		c.first = local
	}
	return local
}
