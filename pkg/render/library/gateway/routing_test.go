package gateway_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
	"github.com/weftio/weft/pkg/testkit"
)

// TestRouting runs each fixture that has requests.yaml through a real
// HAProxy: every endpoint address of the fixture's EndpointSlices becomes
// an HTTP server on its own loopback address that answers with the Service
// and what it received, every Gateway listener port a free local port, the
// bundle is rendered and HAProxy started on it, and every request must be
// answered as the fixture says.
func TestRouting(t *testing.T) {
	res := watched(t)
	for _, f := range fixtures(t) {
		if len(f.Requests) == 0 {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			objs := librarytest.CloneObjects(t, f.Objects)
			librarytest.StartEndpoints(t, objs)
			ports := rewritePorts(t, objs)
			opts := maps.Clone(f.Options)
			if opts == nil {
				opts = map[string]string{}
			}
			opts["bind_address"] = "127.0.0.1"
			dir := t.TempDir()
			r := librarytest.Render(t, gatewayTarget(dir, opts), librarytest.NewIndex(t, res, objs))
			librarytest.WriteBundle(t, dir, r.Bundle)
			var used []int
			for i, rq := range f.Requests {
				port, ok := ports[rq.port()]
				if !ok {
					t.Fatalf("request %d: no listener on port %d", i+1, rq.port())
				}
				if !slices.Contains(used, port) {
					used = append(used, port)
				}
			}
			librarytest.StartHAProxy(t, dir, used...)
			for i, rq := range f.Requests {
				port := ports[rq.port()]
				t.Run(fmt.Sprintf("%d_%s_%s%s", i+1, rq.URLScheme(), rq.Host, rq.Path), func(t *testing.T) {
					check(t, rq, port)
				})
			}
		})
	}
}

// request is one item of a fixture's requests.yaml: a request the routing
// test sends to the running HAProxy and what must answer it.
type request struct {
	librarytest.Request
	Port int `json:"port,omitempty"` // the listener port in the fixture (default 80, or 443 for https)

	// BackendURI and BackendHost are what the backend must receive
	// (default the request's).
	BackendURI  string `json:"backend_uri,omitempty"`
	BackendHost string `json:"backend_host,omitempty"`
	// ResponseHeaders are the headers of the answer ("" for absent).
	ResponseHeaders map[string]string `json:"response_headers,omitempty"`
	// Location is the redirect target; "{port}" in it stands for ":" and
	// the local port of the request's listener.
	Location string `json:"location,omitempty"`
	// With Shares, Repeat requests are sent and each Service must answer
	// its share of them (within 0.1).
	Shares map[string]float64 `json:"shares,omitempty"`
}

func (r request) port() int {
	switch {
	case r.Port != 0:
		return r.Port
	case r.URLScheme() == "https":
		return 443
	}
	return 80
}

// check sends rq (Repeat times) to HAProxy on port and checks the answers.
func check(t *testing.T, rq request, port int) {
	method, path, want := rq.Defaults()
	client := librarytest.Client(rq.SNI)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	counts := map[string]int{}
	n := max(rq.Repeat, 1)
	for i := range n {
		req, err := http.NewRequest(method, rq.URLScheme()+"://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = rq.Host
		for k, v := range rq.Headers {
			req.Header.Set(k, v)
		}
		resp, body := librarytest.Send(t, client, req, i+1)
		if rq.Shares != nil {
			var e librarytest.Echo
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &e) == nil {
				counts[e.Service]++
			} else {
				counts[strconv.Itoa(resp.StatusCode)]++
			}
			continue
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d; body %q", i+1, resp.StatusCode, want, body)
		}
		if rq.Location != "" {
			wantLoc := strings.ReplaceAll(rq.Location, "{port}", ":"+strconv.Itoa(port))
			if got := resp.Header.Get("Location"); got != wantLoc {
				t.Errorf("Location %q, want %q", got, wantLoc)
			}
		}
		for k, v := range rq.ResponseHeaders {
			if got := resp.Header.Values(k); strings.Join(got, ",") != v {
				t.Errorf("response header %s: %q, want %q", k, got, v)
			}
		}
		rq.CheckCert(t, i+1, resp)
		if rq.Backend == "" {
			continue
		}
		var e librarytest.Echo
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("request %d: answer is not from an endpoint: %q", i+1, body)
		}
		if e.Service != rq.Backend {
			t.Errorf("request %d: served by %s, want %s", i+1, e.Service, rq.Backend)
		}
		wantURI, wantHost := cmp(rq.BackendURI, path), cmp(rq.BackendHost, rq.Host)
		if e.Method != method || e.Host != wantHost || e.URI != wantURI {
			t.Errorf("request %d: the endpoint got %s %s %s, want %s %s %s", i+1, e.Method, e.Host, e.URI, method, wantHost, wantURI)
		}
		rq.CheckBackendHeaders(t, i+1, e)
	}
	for svc, share := range rq.Shares {
		if got := float64(counts[svc]) / float64(n); math.Abs(got-share) > 0.1 {
			t.Errorf("%s answered %.2f of the requests, want %.2f (answers: %v)", svc, got, share, counts)
		}
	}
	for svc := range counts {
		if _, ok := rq.Shares[svc]; rq.Shares != nil && !ok {
			t.Errorf("%s answered %d requests, want none (answers: %v)", svc, counts[svc], counts)
		}
	}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// rewritePorts gives every Gateway listener port of objs a free local port
// (the same for the same fixture port), in the Gateways and in the port
// fields of HTTPRoute parentRefs, and returns fixture port -> local port.
func rewritePorts(t *testing.T, objs []librarytest.Object) map[int]int {
	t.Helper()
	ports := map[int]int{}
	local := func(p int) int {
		if _, ok := ports[p]; !ok {
			ports[p] = testkit.FreePort(t)
		}
		return ports[p]
	}
	for _, o := range objs {
		spec, _ := o.Body["spec"].(map[string]any)
		var items []any
		switch o.Type {
		case "gateways":
			items, _ = spec["listeners"].([]any)
		case "httproutes":
			items, _ = spec["parentRefs"].([]any)
		}
		for _, it := range items {
			m := it.(map[string]any)
			if p, ok := m["port"].(int); ok {
				m["port"] = local(p)
			}
		}
	}
	return ports
}
