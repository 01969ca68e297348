package library_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/render/library/librarytest"
	"github.com/weftio/weft/pkg/testkit"
)

// TestRouting runs each fixture that has requests.yaml through a real
// HAProxy: every endpoint address of the fixture's EndpointSlices becomes
// an HTTP server on its own loopback address that answers with the Service
// and the endpoint it stands for, the bundle is rendered for those
// addresses and HAProxy started on it, and every request must be answered
// by the expected Service (and endpoint, port and certificate), or with
// the expected status.
func TestRouting(t *testing.T) {
	res := watched(t)
	for _, f := range fixtures(t) {
		if len(f.Requests) == 0 {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			objs := librarytest.CloneObjects(t, f.Objects)
			librarytest.StartEndpoints(t, objs)
			opts := maps.Clone(f.Options)
			if opts == nil {
				opts = map[string]string{}
			}
			httpPort, httpsPort := testkit.FreePort(t), testkit.FreePort(t)
			opts["bind_address"] = "127.0.0.1"
			opts["http_port"] = strconv.Itoa(httpPort)
			opts["https_port"] = strconv.Itoa(httpsPort)
			dir := t.TempDir()
			r := librarytest.Render(t, ingressTarget(dir, opts), librarytest.NewIndex(t, res, objs))
			librarytest.WriteBundle(t, dir, r.Bundle)
			librarytest.StartHAProxy(t, dir, httpPort)
			for i, rq := range f.Requests {
				port := httpPort
				if rq.Scheme == "https" {
					port = httpsPort
				}
				rq.httpsPort = httpsPort
				t.Run(fmt.Sprintf("%d_%s_%s%s", i+1, rq.URLScheme(), rq.Host, rq.Path), func(t *testing.T) {
					check(t, rq, port)
				})
			}
		})
	}
}

// request is one line of a fixture's requests.yaml: a request the routing
// test sends to the running HAProxy and what must answer it.
type request struct {
	librarytest.Request
	// Port is the target port (as in the EndpointSlice) that must answer.
	Port int `json:"port,omitempty"`
	// Addresses are the endpoint addresses allowed to answer; with
	// AllAddresses, each of them must answer one of the Repeat requests.
	Addresses    []string `json:"addresses,omitempty"`
	AllAddresses bool     `json:"all_addresses,omitempty"`
	// Proto is the X-Forwarded-Proto the backend must receive.
	Proto string `json:"proto,omitempty"`

	// User and Password are sent as basic authentication; Body is the
	// length of a body of "x" sent.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Body     int    `json:"body,omitempty"`
	// ContentLength, when set, is sent as the Content-Length header of a
	// request written by hand with a few bytes of body, and only the
	// answer's status is checked.
	ContentLength int64 `json:"content_length,omitempty"`
	// Statuses are the statuses of the Repeat requests, in order (instead
	// of Status).
	Statuses []int `json:"statuses,omitempty"`
	// URI is the request URI the backend must receive (default Path): the
	// path as normalized by HAProxy, then rewritten.
	URI string `json:"uri,omitempty"`
	// HTTP is the protocol the backend is reached with ("HTTP/1.1",
	// "HTTP/2.0").
	HTTP string `json:"http,omitempty"`
	// ResponseHeaders are headers the answer must have (a header given as
	// "" must be absent).
	ResponseHeaders map[string]string `json:"response_headers,omitempty"`
	// Location is the Location header the answer must carry (redirects);
	// {https_port} in it stands for the HTTPS listener's port.
	Location string `json:"location,omitempty"`

	httpsPort int // the HTTPS listener's port, for {https_port} in Location
}

// check sends rq (Repeat times) to HAProxy on port and checks the answers.
func check(t *testing.T, rq request, port int) {
	method, path, want := rq.Defaults()
	client := librarytest.Client(rq.SNI)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if rq.ContentLength > 0 {
		if got := rawStatus(t, addr, method, rq.Host, path, rq.ContentLength); got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
		return
	}
	seen := map[string]bool{}
	for n := range max(rq.Repeat, 1) {
		var reqBody io.Reader
		if rq.Body > 0 {
			reqBody = strings.NewReader(strings.Repeat("x", rq.Body))
		}
		req, err := http.NewRequest(method, rq.URLScheme()+"://"+addr+path, reqBody)
		if err != nil {
			t.Fatal(err)
		}
		if p, _, _ := strings.Cut(path, "?"); !strings.HasPrefix(p, "//") {
			req.URL.Opaque = p // sent as written: no dot segment or escape is touched
		}
		for k, v := range rq.Headers {
			req.Header.Set(k, v)
		}
		if rq.User != "" {
			req.SetBasicAuth(rq.User, rq.Password)
		}
		if n < len(rq.Statuses) {
			want = rq.Statuses[n]
		}
		host := addr
		if rq.Host != "" {
			req.Host, host = rq.Host, rq.Host
		}
		resp, body := librarytest.Send(t, client, req, n+1)
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d; body %q", n+1, resp.StatusCode, want, body)
		}
		if rq.Location != "" {
			if got, want := resp.Header.Get("Location"), strings.ReplaceAll(rq.Location, "{https_port}", strconv.Itoa(rq.httpsPort)); got != want {
				t.Errorf("request %d: Location %q, want %q", n+1, got, want)
			}
		}
		for k, v := range rq.ResponseHeaders {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("request %d: response header %s %q, want %q", n+1, k, got, v)
			}
		}
		rq.CheckCert(t, n+1, resp)
		if rq.Backend == "" || want != http.StatusOK {
			continue
		}
		var e librarytest.Echo
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("request %d: answer is not from an endpoint: %q", n+1, body)
		}
		if e.Service != rq.Backend {
			t.Errorf("request %d: served by %s (%s:%d), want %s", n+1, e.Service, e.Address, e.Port, rq.Backend)
		}
		if len(rq.Addresses) > 0 && !slices.Contains(rq.Addresses, e.Address) {
			t.Errorf("request %d: served by endpoint %s, want one of %v", n+1, e.Address, rq.Addresses)
		}
		if rq.Port != 0 && e.Port != rq.Port {
			t.Errorf("request %d: served on target port %d, want %d", n+1, e.Port, rq.Port)
		}
		uri := path
		if rq.URI != "" {
			uri = rq.URI
		}
		if e.Method != method || e.Host != host || e.URI != uri {
			t.Errorf("request %d: the endpoint got %s %s %s, want %s %s %s", n+1, e.Method, e.Host, e.URI, method, host, uri)
		}
		rq.CheckBackendHeaders(t, n+1, e)
		if rq.HTTP != "" && e.HTTP != rq.HTTP {
			t.Errorf("request %d: the endpoint was reached with %s, want %s", n+1, e.HTTP, rq.HTTP)
		}
		if rq.Proto != "" && e.Proto != rq.Proto {
			t.Errorf("request %d: X-Forwarded-Proto %q, want %q", n+1, e.Proto, rq.Proto)
		}
		seen[e.Address] = true
	}
	if rq.AllAddresses {
		if got := slices.Sorted(maps.Keys(seen)); !slices.Equal(got, slices.Sorted(slices.Values(rq.Addresses))) {
			t.Errorf("endpoints that answered: %v, want each of %v", got, rq.Addresses)
		}
	}
}

// rawStatus writes a request with the given Content-Length header and a
// few bytes of body to addr and returns the status of the answer.
func rawStatus(t *testing.T, addr, method, host, path string, contentLength int64) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\nxxxx", method, path, host, contentLength)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
