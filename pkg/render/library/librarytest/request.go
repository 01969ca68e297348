package librarytest

import (
	"net/http"
	"testing"
)

// Request is what the routing tests of both libraries share of an item of
// requests.yaml: the request sent to the running HAProxy and the answer's
// basics. Each library embeds it in its own request format with the
// fields only it has.
type Request struct {
	Method  string            `json:"method,omitempty"`  // default GET
	Scheme  string            `json:"scheme,omitempty"`  // http (default) or https
	Host    string            `json:"host"`              // the Host header ("": the address)
	Path    string            `json:"path,omitempty"`    // the request URI, default "/"
	Headers map[string]string `json:"headers,omitempty"` // request headers
	SNI     string            `json:"sni,omitempty"`     // https: the server name sent (none when empty)
	// Backend is the Service that must answer (status 200); without it,
	// Status is the status HAProxy must answer with.
	Backend string `json:"backend,omitempty"`
	Status  int    `json:"status,omitempty"`
	// Repeat is how many times the request is sent (default once).
	Repeat int `json:"repeat,omitempty"`
	// Cert is the common name of the certificate HAProxy must present.
	Cert string `json:"cert,omitempty"`
	// BackendHeaders are request headers the backend must receive ("" for
	// a header it must not receive).
	BackendHeaders map[string]string `json:"backend_headers,omitempty"`
}

// URLScheme is the request's scheme: Scheme, default http.
func (r Request) URLScheme() string {
	if r.Scheme == "" {
		return "http"
	}
	return r.Scheme
}

// Defaults are the request's method, request URI and wanted status with
// their defaults (GET, "/", 200).
func (r Request) Defaults() (method, path string, status int) {
	method, path, status = r.Method, r.Path, r.Status
	if method == "" {
		method = http.MethodGet
	}
	if path == "" {
		path = "/"
	}
	if status == 0 {
		status = http.StatusOK
	}
	return method, path, status
}

// CheckCert checks that the answer to request n came with the
// certificate Cert (when set).
func (r Request) CheckCert(t testing.TB, n int, resp *http.Response) {
	t.Helper()
	if r.Cert == "" {
		return
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatalf("request %d: no TLS certificate", n)
	}
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != r.Cert {
		t.Errorf("request %d: certificate %q, want %q", n, cn, r.Cert)
	}
}

// CheckBackendHeaders checks that the backend that answered request n
// with e received BackendHeaders.
func (r Request) CheckBackendHeaders(t testing.TB, n int, e Echo) {
	t.Helper()
	for k, v := range r.BackendHeaders {
		if got := e.Headers[http.CanonicalHeaderKey(k)]; got != v {
			t.Errorf("request %d: the endpoint got header %s %q, want %q", n, k, got, v)
		}
	}
}
