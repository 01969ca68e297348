package gateway_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/render/target"
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
		if len(f.requests) == 0 {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			objs := cloneObjects(t, f.objects)
			startEndpoints(t, objs)
			ports := rewritePorts(t, objs)
			opts := maps.Clone(f.options)
			if opts == nil {
				opts = map[string]string{}
			}
			opts["bind_address"] = "127.0.0.1"
			dir := t.TempDir()
			r := render(t, gatewayTarget(dir, opts), newIndex(t, res, objs))
			writeBundle(t, dir, r.Bundle)
			var used []int
			for i, rq := range f.requests {
				port, ok := ports[rq.port()]
				if !ok {
					t.Fatalf("request %d: no listener on port %d", i+1, rq.port())
				}
				if !slices.Contains(used, port) {
					used = append(used, port)
				}
			}
			startHAProxy(t, dir, used)
			for i, rq := range f.requests {
				port := ports[rq.port()]
				t.Run(fmt.Sprintf("%d_%s_%s%s", i+1, rq.scheme(), rq.Host, rq.Path), func(t *testing.T) {
					check(t, rq, port)
				})
			}
		})
	}
}

// request is one item of a fixture's requests.yaml: a request the routing
// test sends to the running HAProxy and what must answer it.
type request struct {
	Method  string            `json:"method,omitempty"`  // default GET
	Scheme  string            `json:"scheme,omitempty"`  // http (default) or https
	Port    int               `json:"port,omitempty"`    // the listener port in the fixture (default 80, or 443 for https)
	Host    string            `json:"host"`              // the Host header
	Path    string            `json:"path,omitempty"`    // the request URI, default "/"
	Headers map[string]string `json:"headers,omitempty"` // request headers
	SNI     string            `json:"sni,omitempty"`     // https: the server name sent (none when empty)

	// Backend is the Service that must answer (status 200); without it,
	// Status is the status HAProxy must answer with.
	Backend string `json:"backend,omitempty"`
	Status  int    `json:"status,omitempty"`
	// BackendURI and BackendHost are what the backend must receive
	// (default the request's); BackendHeaders the request headers it must
	// receive ("" for a header it must not receive).
	BackendURI     string            `json:"backend_uri,omitempty"`
	BackendHost    string            `json:"backend_host,omitempty"`
	BackendHeaders map[string]string `json:"backend_headers,omitempty"`
	// ResponseHeaders are the headers of the answer ("" for absent).
	ResponseHeaders map[string]string `json:"response_headers,omitempty"`
	// Location is the redirect target; "{port}" in it stands for ":" and
	// the local port of the request's listener.
	Location string `json:"location,omitempty"`
	// Cert is the common name of the certificate HAProxy must present.
	Cert string `json:"cert,omitempty"`
	// With Shares, Repeat requests are sent and each Service must answer
	// its share of them (within 0.1).
	Repeat int                `json:"repeat,omitempty"`
	Shares map[string]float64 `json:"shares,omitempty"`
}

func (r request) scheme() string {
	if r.Scheme == "" {
		return "http"
	}
	return r.Scheme
}

func (r request) port() int {
	switch {
	case r.Port != 0:
		return r.Port
	case r.scheme() == "https":
		return 443
	}
	return 80
}

// echo is what an endpoint server answers.
type echo struct {
	Service string            `json:"service"`
	Method  string            `json:"method"`
	Host    string            `json:"host"`
	URI     string            `json:"uri"`
	Headers map[string]string `json:"headers"`
}

// echoResponseHeaders are set on every endpoint answer, for the response
// header filters to change.
var echoResponseHeaders = map[string]string{"X-Echo-Set": "original", "X-Echo-Remove": "original"}

// check sends rq (Repeat times) to HAProxy on port and checks the answers.
func check(t *testing.T, rq request, port int) {
	path := rq.Path
	if path == "" {
		path = "/"
	}
	method := rq.Method
	if method == "" {
		method = http.MethodGet
	}
	want := rq.Status
	if want == 0 {
		want = http.StatusOK
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{ServerName: rq.SNI, InsecureSkipVerify: true}, // test certificates are self-signed
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	counts := map[string]int{}
	n := max(rq.Repeat, 1)
	for i := range n {
		req, err := http.NewRequest(method, rq.scheme()+"://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = rq.Host
		for k, v := range rq.Headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if rq.Shares != nil {
			var e echo
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
		if rq.Cert != "" {
			if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
				t.Fatalf("request %d: no TLS certificate", i+1)
			}
			if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != rq.Cert {
				t.Errorf("request %d: certificate %q, want %q", i+1, cn, rq.Cert)
			}
		}
		if rq.Backend == "" {
			continue
		}
		var e echo
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
		for k, v := range rq.BackendHeaders {
			if got := e.Headers[http.CanonicalHeaderKey(k)]; got != v {
				t.Errorf("request %d: the endpoint got header %s %q, want %q", i+1, k, got, v)
			}
		}
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

func cloneObjects(t *testing.T, objs []object) []object {
	t.Helper()
	out := make([]object, len(objs))
	for i, o := range objs {
		o.body = roundTrip(t, o.body)
		out[i] = o
	}
	return out
}

// rewritePorts gives every Gateway listener port of objs a free local port
// (the same for the same fixture port), in the Gateways and in the port
// fields of HTTPRoute parentRefs, and returns fixture port -> local port.
func rewritePorts(t *testing.T, objs []object) map[int]int {
	t.Helper()
	ports := map[int]int{}
	local := func(p int) int {
		if _, ok := ports[p]; !ok {
			ports[p] = freePort(t)
		}
		return ports[p]
	}
	for _, o := range objs {
		spec, _ := o.body["spec"].(map[string]any)
		var items []any
		switch o.typ {
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

// startEndpoints rewrites the EndpointSlices of objs to point at local
// servers: each distinct endpoint IP address becomes its own loopback
// address 127.0.0.<n>, each distinct target port a free port, and a
// server on every such address and port answers with its Service and what
// it received.
func startEndpoints(t *testing.T, objs []object) {
	t.Helper()
	addrs := map[string]string{} // fixture address -> loopback address
	ports := map[int]int{}       // fixture port -> local port
	owner := map[string]string{} // fixture address -> Service
	started := map[string]bool{}
	for _, o := range objs {
		if o.typ != "endpoints" {
			continue
		}
		labels, _ := o.body["metadata"].(map[string]any)["labels"].(map[string]any)
		service, _ := labels["kubernetes.io/service-name"].(string)
		var local []int
		slicePorts, _ := o.body["ports"].([]any)
		for _, p := range slicePorts {
			pm := p.(map[string]any)
			orig, _ := pm["port"].(int)
			if _, ok := ports[orig]; !ok {
				ports[orig] = freePort(t)
			}
			pm["port"] = ports[orig]
			local = append(local, ports[orig])
		}
		list, _ := o.body["endpoints"].([]any)
		for _, ep := range list {
			as, _ := ep.(map[string]any)["addresses"].([]any)
			for i, a := range as {
				orig := a.(string)
				if net.ParseIP(orig) == nil {
					continue // not an address the library may use
				}
				if s, ok := owner[orig]; ok && s != service {
					t.Fatalf("address %s is an endpoint of both %s and %s", orig, s, service)
				}
				owner[orig] = service
				if _, ok := addrs[orig]; !ok {
					addrs[orig] = fmt.Sprintf("127.0.0.%d", len(addrs)+2)
				}
				as[i] = addrs[orig]
				for _, port := range local {
					listen := net.JoinHostPort(addrs[orig], strconv.Itoa(port))
					if !started[listen] {
						started[listen] = true
						serveEcho(t, listen, service)
					}
				}
			}
		}
	}
}

// serveEcho runs an endpoint server of service on listen until the test
// ends.
func serveEcho(t *testing.T, listen, service string) {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("endpoint %s of %s: %v", listen, service, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers := map[string]string{}
		for k, v := range r.Header {
			headers[k] = strings.Join(v, ",")
		}
		for k, v := range echoResponseHeaders {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echo{Service: service, Method: r.Method, Host: r.Host, URI: r.RequestURI, Headers: headers})
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// startHAProxy runs HAProxy in the foreground on the bundle in dir until
// the test ends, and waits until it accepts connections on every port.
func startHAProxy(t *testing.T, dir string, ports []int) {
	t.Helper()
	out := &testkit.SyncBuffer{}
	cmd := exec.Command(testkit.HAProxy(t), "-db", "-f", filepath.Join(dir, target.MainFile))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
	for _, port := range ports {
		testkit.Eventually(t, 20*time.Second, func() error {
			select {
			case <-done:
				t.Fatalf("haproxy exited: %v\n%s", cmd.ProcessState, out.String())
			default:
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
			if err != nil {
				return fmt.Errorf("haproxy does not listen on port %d: %w", port, err)
			}
			return c.Close()
		})
	}
}
