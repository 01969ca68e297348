//go:build linux

package runtime

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

var longlivedDeploys = flag.Int("longlived.deploys", 50, "deploys of each kind in TestLongLivedConnectionsSurviveDeploys")

// deployKind is a kind of change TestLongLivedConnectionsSurviveDeploys
// makes to the cluster's objects, and what the driver must make of it.
type deployKind struct {
	name string
	// change is the state after deploy i of this kind.
	change func(s wsState, i int, echoes []*testkit.WSEcho) wsState
	// reload: the deploy must reload (for the configuration's structure);
	// otherwise it must be Runtime API commands only, each containing op.
	reload bool
	op     string
}

// The kinds of change of TestLongLivedConnectionsSurviveDeploys, in the
// order it makes them.
var deployKinds = []deployKind{endpointsKind, mapKind, reloadKind}

// endpointsKind: an endpoint leaves the Service's EndpointSlice, the one
// that left before comes back: the servers after it move to other slots
// (set server ... addr), the last slot goes to or leaves maintenance.
var endpointsKind = deployKind{
	name: "endpoints",
	change: func(s wsState, i int, echoes []*testkit.WSEcho) wsState {
		s.up = without(echoes, echoes[i%len(echoes)])
		return s
	},
	op: "set server ",
}

// mapKind: a new host on the existing Service replaces the previous one:
// map entries only.
var mapKind = deployKind{
	name: "map",
	change: func(s wsState, i int, _ []*testkit.WSEcho) wsState {
		s.hosts = []string{fmt.Sprintf("ws-%d.example", i)}
		return s
	},
	op: " map ",
}

// reloadKind: even deploys change an annotation that sets a response
// header in the Ingress's backends; odd ones replace the Service of the
// Ingress extra, so a backend section comes and one goes.
var reloadKind = deployKind{
	name: "reload",
	change: func(s wsState, i int, _ []*testkit.WSEcho) wsState {
		if i%2 == 0 {
			s.annotations = map[string]string{"weft.io/response-set-header": fmt.Sprintf("X-Deploy %d", i)}
		} else {
			s.extra = fmt.Sprintf("extra-%d", i)
		}
		return s
	},
	reload: true,
}

// check fails the test unless res is what a deploy of kind k must be.
func (k deployKind) check(t *testing.T, step string, res Result) {
	t.Helper()
	if k.reload {
		if !res.Reloaded || res.ReloadReason != ReasonStructure {
			t.Fatalf("%s: reloaded %v (reason %q: %s), want a reload for the structure", step, res.Reloaded, res.ReloadReason, res.ReloadDetail)
		}
		return
	}
	if res.Reloaded || res.ReloadReason != "" || len(res.RuntimeOps) == 0 {
		t.Fatalf("%s: reloaded %v (reason %q: %s), ops %v; want Runtime API commands only", step, res.Reloaded, res.ReloadReason, res.ReloadDetail, res.RuntimeOps)
	}
	for _, op := range res.RuntimeOps {
		if !strings.Contains(op, k.op) {
			t.Fatalf("%s: command %q among %v, want only commands with %q", step, op, res.RuntimeOps, k.op)
		}
	}
}

// TestLongLivedConnectionsSurviveDeploys holds 100 WebSocket connections
// through an HAProxy that runs the ingress library's bundle, rendered
// incrementally from an Ingress, Services and EndpointSlices whose
// endpoints are four WebSocket backends, while the runtime driver
// delivers 50 deploys of each kind of change made to those objects (see
// deployKinds): endpoint changes and new hosts, which must be Runtime API
// commands only, and structural changes, which must each be one reload.
// Before each reload one more connection is opened, so that every
// replaced worker holds some. After every deploy each connection sends a
// message and must get its echo from the backend it was first routed to:
// none may be dropped, including those whose endpoint left the Service;
// keep-alive HTTP connections must survive the deploys without a reload.
// It takes about 30s (-race, 2 busy cores); -longlived.deploys sets the
// deploys of each kind (50) for a longer run.
func TestLongLivedConnectionsSurviveDeploys(t *testing.T) {
	const conns = 100
	echoes := testkit.StartWSEchoes(t, 4)
	st := newWSState(t, echoes, startHTTPBackend(t))
	r := newIngressRig(t, nil, st.objects(t)...)

	ws := r.wsFleet(conns)
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
		keepAlive[i] = newKeepAliveClient(t, "http://"+r.httpAddr()+"/", "app.example")
		keepAlive[i].get(t, "start")
	}
	if n := ws.Check("start"); n != 0 {
		t.Fatalf("%d connections dropped before any deploy", n)
	}

	removed := map[string]bool{} // backends that left the Service
	reloadsBefore := r.reloads()
	for _, kind := range deployKinds {
		for i := range *longlivedDeploys {
			step := fmt.Sprintf("%s deploy %d", kind.name, i)
			if kind.reload {
				// The worker about to be replaced holds a connection
				// too, as it does when clients keep connecting.
				ws.Dial()
			}
			st = kind.change(st, i, echoes)
			for _, e := range echoes {
				if !slices.Contains(st.up, e) {
					removed[e.Name] = true
				}
			}
			res := r.deploy(st.objects(t)...)
			kind.check(t, step, res)
			for j, c := range keepAlive {
				if local := c.get(t, step); !kind.reload && local != c.first {
					t.Fatalf("keep-alive client %d: after %s its connection is from %s, was %s: the connection was closed", j, step, local, c.first)
				}
			}
			if n := ws.Check(step); n != 0 {
				ws.ReportDropped()
				t.Fatalf("%d of %d connections dropped by %s (ops %v)", n, ws.Len(), step, res.RuntimeOps)
			}
		}
	}
	if got := r.reloads() - reloadsBefore; got != *longlivedDeploys {
		t.Errorf("%d reloads, want %d", got, *longlivedDeploys)
	}
	if want := min(*longlivedDeploys, len(echoes)); len(removed) != want {
		t.Errorf("backends removed at some point: %v, want %d", removed, want)
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
