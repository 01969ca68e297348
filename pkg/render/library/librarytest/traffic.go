package librarytest

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/testkit"
)

// Echo is what an endpoint server started by StartEndpoints answers.
type Echo struct {
	Service string `json:"service"`
	Address string `json:"address"` // the endpoint address in the fixture
	Port    int    `json:"port"`    // the target port in the fixture
	Method  string `json:"method"`
	Host    string `json:"host"`
	URI     string `json:"uri"`
	Proto   string `json:"proto"` // X-Forwarded-Proto
	HTTP    string `json:"http"`  // the protocol the endpoint was reached with
	// Headers are the request headers the endpoint received, the values
	// of a header joined with ",".
	Headers map[string]string `json:"headers"`
}

// EchoResponseHeaders are set on every endpoint answer, for response
// header filters to change.
var EchoResponseHeaders = map[string]string{"X-Echo-Set": "original", "X-Echo-Remove": "original"}

// StartEndpoints rewrites the EndpointSlices (type "endpoints") of objs to
// point at local servers: each distinct endpoint IP address becomes its
// own loopback address 127.0.0.<n>, each distinct target port a free
// port, and a server on every such address and port answers with an Echo
// of the Service, the original address and port and what it received,
// until the test ends. Endpoints speak HTTP/1.1 and HTTP/2 (h2c without
// TLS); those of a slice labelled test.weft.io/serving-secret serve TLS
// with the certificate and key of that Secret of objs (same namespace).
func StartEndpoints(t testing.TB, objs []Object) {
	t.Helper()
	addrs := map[string]string{} // fixture address -> loopback address
	ports := map[int]int{}       // fixture port -> local port
	owner := map[string]string{} // fixture address -> Service
	started := map[string]bool{}
	for _, o := range objs {
		if o.Type != "endpoints" {
			continue
		}
		meta, _ := o.Body["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		service, _ := labels["kubernetes.io/service-name"].(string)
		var cert *tls.Certificate
		if name, ok := labels["test.weft.io/serving-secret"].(string); ok {
			ns, _ := meta["namespace"].(string)
			cert = servingSecret(t, objs, ns, name)
		}
		slicePorts, _ := o.Body["ports"].([]any)
		var origPorts []int
		for _, p := range slicePorts {
			pm := p.(map[string]any)
			orig, _ := pm["port"].(int)
			if _, ok := ports[orig]; !ok {
				ports[orig] = testkit.FreePort(t)
			}
			pm["port"] = ports[orig]
			origPorts = append(origPorts, orig)
		}
		list, _ := o.Body["endpoints"].([]any)
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
				for _, port := range origPorts {
					listen := net.JoinHostPort(addrs[orig], strconv.Itoa(ports[port]))
					if !started[listen] {
						started[listen] = true
						serveEcho(t, listen, Echo{Service: service, Address: orig, Port: port}, cert)
					}
				}
			}
		}
	}
}

// EchoDelayHeader is a request header that makes an endpoint server wait
// that long (a Go duration, at most 10s) before it answers: a slow backend,
// for timeouts.
const EchoDelayHeader = "X-Echo-Delay"

// serveEcho runs an endpoint server on listen until the test ends: it
// answers with id and what it received, after the request's
// EchoDelayHeader; with cert, over TLS.
func serveEcho(t testing.TB, listen string, id Echo, cert *tls.Certificate) {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("endpoint %s:%d of %s: %v", id.Address, id.Port, id.Service, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.Header.Get(EchoDelayHeader)); err == nil && d > 0 {
			select {
			case <-time.After(min(d, 10*time.Second)):
			case <-r.Context().Done():
				return
			}
		}
		e := id
		e.Method, e.Host, e.URI = r.Method, r.Host, r.RequestURI
		e.Proto, e.HTTP = r.Header.Get("X-Forwarded-Proto"), r.Proto
		e.Headers = map[string]string{}
		for k, v := range r.Header {
			e.Headers[k] = strings.Join(v, ",")
		}
		for k, v := range EchoResponseHeaders {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(e)
	}), ReadHeaderTimeout: 5 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.Protocols.SetHTTP2(true)
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	t.Cleanup(func() { srv.Close() })
}

// servingSecret is the certificate and key of the kubernetes.io/tls Secret
// namespace/name of objs.
func servingSecret(t testing.TB, objs []Object, namespace, name string) *tls.Certificate {
	t.Helper()
	for _, o := range objs {
		meta, _ := o.Body["metadata"].(map[string]any)
		if o.Type != "secrets" || meta["namespace"] != namespace || meta["name"] != name {
			continue
		}
		data, _ := o.Body["data"].(map[string]any)
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

// StartHAProxy runs HAProxy in the foreground on the bundle in dir until
// the test ends, and waits until it accepts connections on every port of
// 127.0.0.1 given; its output is logged when the test fails.
func StartHAProxy(t testing.TB, dir string, ports ...int) {
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

// Send sends req, request n of a test, with client and returns the
// answer and its body.
func Send(t testing.TB, client *http.Client, req *http.Request, n int) (*http.Response, []byte) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("request %d: %v", n, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// Client is the HTTP client requests are sent to HAProxy with: no
// connection reuse, no redirect followed, and over TLS the server name
// sni (none when empty), any certificate accepted (test certificates are
// self-signed).
func Client(sni string) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{ServerName: sni, InsecureSkipVerify: true}, // test certificates are self-signed
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
