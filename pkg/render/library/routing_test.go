package library_test

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
// and the endpoint it stands for, the bundle is rendered for those
// addresses and HAProxy started on it, and every request must be answered
// by the expected Service (and endpoint, port and certificate), or with
// the expected status.
func TestRouting(t *testing.T) {
	res := watched(t)
	for _, f := range fixtures(t) {
		if len(f.requests) == 0 {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			objs := cloneObjects(t, f.objects)
			startEndpoints(t, objs)
			opts := maps.Clone(f.options)
			if opts == nil {
				opts = map[string]string{}
			}
			httpPort, httpsPort := freePort(t), freePort(t)
			opts["bind_address"] = "127.0.0.1"
			opts["http_port"] = strconv.Itoa(httpPort)
			opts["https_port"] = strconv.Itoa(httpsPort)
			dir := t.TempDir()
			r := render(t, ingressTarget(dir, opts), newIndex(t, res, objs))
			writeBundle(t, dir, r.Bundle)
			startHAProxy(t, dir, httpPort)
			for i, rq := range f.requests {
				port := httpPort
				if rq.Scheme == "https" {
					port = httpsPort
				}
				rq.httpsPort = httpsPort
				t.Run(fmt.Sprintf("%d_%s_%s%s", i+1, rq.scheme(), rq.Host, rq.Path), func(t *testing.T) {
					check(t, rq, port)
				})
			}
		})
	}
}

// request is one line of a fixture's requests.yaml: a request the routing
// test sends to the running HAProxy and what must answer it.
type request struct {
	Method string `json:"method,omitempty"` // default GET
	Scheme string `json:"scheme,omitempty"` // http (default) or https
	Host   string `json:"host"`             // the Host header ("": the address)
	Path   string `json:"path,omitempty"`   // default "/"
	SNI    string `json:"sni,omitempty"`    // https: the server name sent (none when empty)
	// Backend is the Service that must answer (status 200); without it,
	// Status is the status HAProxy must answer with.
	Backend string `json:"backend,omitempty"`
	Status  int    `json:"status,omitempty"`
	// Port is the target port (as in the EndpointSlice) that must answer.
	Port int `json:"port,omitempty"`
	// Addresses are the endpoint addresses allowed to answer; with
	// AllAddresses, each of them must answer one of the Repeat requests.
	Addresses    []string `json:"addresses,omitempty"`
	AllAddresses bool     `json:"all_addresses,omitempty"`
	Repeat       int      `json:"repeat,omitempty"`
	// Cert is the common name of the certificate HAProxy must present.
	Cert string `json:"cert,omitempty"`
	// Proto is the X-Forwarded-Proto the backend must receive.
	Proto string `json:"proto,omitempty"`

	// Headers are sent with the request; User and Password as basic
	// authentication; Body is the length of a body of "x" sent.
	Headers  map[string]string `json:"headers,omitempty"`
	User     string            `json:"user,omitempty"`
	Password string            `json:"password,omitempty"`
	Body     int               `json:"body,omitempty"`
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
	// BackendHeaders are headers the backend must receive, and HTTP the
	// protocol it is reached with ("HTTP/1.1", "HTTP/2.0").
	BackendHeaders map[string]string `json:"backend_headers,omitempty"`
	HTTP           string            `json:"http,omitempty"`
	// ResponseHeaders are headers the answer must have (a header given as
	// "" must be absent).
	ResponseHeaders map[string]string `json:"response_headers,omitempty"`
	// Location is the Location header the answer must carry (redirects);
	// {https_port} in it stands for the HTTPS listener's port.
	Location string `json:"location,omitempty"`

	httpsPort int // the HTTPS listener's port, for {https_port} in Location
}

func (r request) scheme() string {
	if r.Scheme == "" {
		return "http"
	}
	return r.Scheme
}

// echo is what an endpoint server answers.
type echo struct {
	Service string `json:"service"`
	Address string `json:"address"` // the endpoint address in the fixture
	Port    int    `json:"port"`    // the target port in the fixture
	Method  string `json:"method"`
	Host    string `json:"host"`
	URI     string `json:"uri"`
	Proto   string `json:"proto"` // X-Forwarded-Proto
	HTTP    string `json:"http"`  // the protocol the endpoint was reached with
	// Headers are the request headers the endpoint received.
	Headers map[string]string `json:"headers"`
}

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
		req, err := http.NewRequest(method, rq.scheme()+"://"+addr+path, reqBody)
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
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", n+1, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
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
		if rq.Cert != "" {
			if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
				t.Fatalf("request %d: no TLS certificate", n+1)
			}
			if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != rq.Cert {
				t.Errorf("request %d: certificate %q, want %q", n+1, cn, rq.Cert)
			}
		}
		if rq.Backend == "" || want != http.StatusOK {
			continue
		}
		var e echo
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
		for k, v := range rq.BackendHeaders {
			if got := e.Headers[http.CanonicalHeaderKey(k)]; got != v {
				t.Errorf("request %d: the endpoint got header %s %q, want %q", n+1, k, got, v)
			}
		}
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

func cloneObjects(t *testing.T, objs []object) []object {
	t.Helper()
	out := make([]object, len(objs))
	for i, o := range objs {
		o.body = roundTrip(t, o.body)
		out[i] = o
	}
	return out
}

// startEndpoints rewrites the EndpointSlices of objs to point at local
// servers: each distinct endpoint IP address becomes its own loopback address
// 127.0.0.<n>, each distinct target port a free port, and a server on
// every such address and port answers with the Service, the original
// address and the original port. The endpoints of a slice labelled
// test.weft.io/serving-secret serve TLS with the certificate and key of
// that Secret of the fixture (same namespace).
func startEndpoints(t *testing.T, objs []object) {
	t.Helper()
	addrs := map[string]string{} // fixture address -> loopback address
	ports := map[int]int{}       // fixture port -> local port
	owner := map[string]string{} // fixture address -> Service
	type endpoint struct {
		service, addr string
		port          int
		cert          *tls.Certificate
	}
	var eps []endpoint
	for _, o := range objs {
		if o.typ != "endpoints" {
			continue
		}
		labels, _ := o.body["metadata"].(map[string]any)["labels"].(map[string]any)
		service, _ := labels["kubernetes.io/service-name"].(string)
		var cert *tls.Certificate
		if name, ok := labels["test.weft.io/serving-secret"].(string); ok {
			ns, _ := o.body["metadata"].(map[string]any)["namespace"].(string)
			cert = servingSecret(t, objs, ns, name)
		}
		slicePorts, _ := o.body["ports"].([]any)
		var origPorts []int
		for _, p := range slicePorts {
			pm := p.(map[string]any)
			orig, _ := pm["port"].(int)
			if _, ok := ports[orig]; !ok {
				ports[orig] = freePort(t)
			}
			pm["port"] = ports[orig]
			origPorts = append(origPorts, orig)
		}
		list, _ := o.body["endpoints"].([]any)
		for _, ep := range list {
			em := ep.(map[string]any)
			as, _ := em["addresses"].([]any)
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
				for _, port := range origPorts {
					eps = append(eps, endpoint{service: service, addr: orig, port: port, cert: cert})
				}
			}
		}
	}
	started := map[string]bool{}
	for _, ep := range eps {
		listen := net.JoinHostPort(addrs[ep.addr], strconv.Itoa(ports[ep.port]))
		if started[listen] {
			continue
		}
		started[listen] = true
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			t.Fatalf("endpoint %s:%d of %s: %v", ep.addr, ep.port, ep.service, err)
		}
		ep := ep
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			headers := map[string]string{}
			for k := range r.Header {
				headers[k] = r.Header.Get(k)
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(echo{Service: ep.service, Address: ep.addr, Port: ep.port,
				Method: r.Method, Host: r.Host, URI: r.RequestURI, Proto: r.Header.Get("X-Forwarded-Proto"),
				HTTP: r.Proto, Headers: headers})
		}), ReadHeaderTimeout: 5 * time.Second}
		// Endpoints speak HTTP/1.1 and HTTP/2 (h2c without TLS), for the
		// backend-protocol annotation.
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		if ep.cert != nil {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*ep.cert}}
			srv.Protocols.SetHTTP2(true)
			go srv.ServeTLS(ln, "", "")
		} else {
			go srv.Serve(ln)
		}
		t.Cleanup(func() { srv.Close() })
	}
}

// servingSecret is the certificate and key of the kubernetes.io/tls Secret
// namespace/name of objs.
func servingSecret(t *testing.T, objs []object, namespace, name string) *tls.Certificate {
	t.Helper()
	for _, o := range objs {
		meta, _ := o.body["metadata"].(map[string]any)
		if o.typ != "secrets" || meta["namespace"] != namespace || meta["name"] != name {
			continue
		}
		data, _ := o.body["data"].(map[string]any)
		crt, err1 := base64.StdEncoding.DecodeString(fmt.Sprint(data["tls.crt"]))
		key, err2 := base64.StdEncoding.DecodeString(fmt.Sprint(data["tls.key"]))
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("secret %s/%s: %v", namespace, name, err)
		}
		cert, err := tls.X509KeyPair(crt, key)
		if err != nil {
			t.Fatalf("secret %s/%s: %v", namespace, name, err)
		}
		return &cert
	}
	t.Fatalf("no secret %s/%s in the fixture", namespace, name)
	return nil
}

// freePort returns a TCP port that was free on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startHAProxy runs HAProxy in the foreground on the bundle in dir until
// the test ends, and waits until it accepts connections on port.
func startHAProxy(t *testing.T, dir string, port int) {
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("haproxy exited: %v\n%s", cmd.ProcessState, out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy does not listen on port %d: %v\n%s", port, err, strings.TrimSpace(out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
