//go:build linux

package runtime

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	weftconfig "github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/library/librarytest"
	"github.com/weftio/weft/pkg/testkit"
)

// ingressRig is a rig whose HAProxy runs the ingress library's bundle,
// rendered from Kubernetes objects as the renderer renders it, for the
// rig's folder, ports (bind_address 127.0.0.1) and admin socket.
type ingressRig struct {
	*rig
	scene *librarytest.Scene
}

// newIngressRig starts HAProxy on the ingress library's bundle over objs,
// with the library options opts besides those the rig sets.
func newIngressRig(tb testing.TB, opts map[string]string, objs ...librarytest.Object) *ingressRig {
	tb.Helper()
	ir := &ingressRig{}
	newRigFiles(tb, func(r *rig) []File {
		ir.rig = r
		o := maps.Clone(opts)
		if o == nil {
			o = map[string]string{}
		}
		o["bind_address"] = "127.0.0.1"
		o["http_port"] = strconv.Itoa(r.httpPort)
		o["https_port"] = strconv.Itoa(r.tlsPort)
		o["admin_socket"] = r.admin
		tc := weftconfig.Target{Library: "ingress", Base: r.dir, LibraryOptions: o}
		ir.scene = librarytest.NewScene(tb, tc, librarytest.WatchedOf(tb, "ingress"), objs...)
		return ir.files()
	})
	return ir
}

// files is the bundle rendered over the scene's objects, as the deployer
// hands it to the driver.
func (ir *ingressRig) files() []File {
	ir.tb.Helper()
	b := ir.scene.Bundle()
	files := make([]File, len(b.Files))
	for i, f := range b.Files {
		files[i] = File{Path: f.Path, Content: f.Content, Secret: f.Secret()}
	}
	return files
}

// deploy makes objs the cluster's objects and applies the bundle rendered
// over them.
func (ir *ingressRig) deploy(objs ...librarytest.Object) Result {
	ir.tb.Helper()
	ir.scene.Sync(objs...)
	return ir.apply(ir.files())
}

// httpAddr is the address of the library's HTTP listener.
func (ir *ingressRig) httpAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ir.httpPort))
}

// wsFleet holds n WebSocket connections to ws.example through HAProxy.
func (ir *ingressRig) wsFleet(n int) *testkit.WSFleet {
	ir.tb.Helper()
	ws := testkit.NewWSFleet(ir.tb, ir.httpAddr(), "ws.example", "/chat")
	for range n {
		ws.Dial()
	}
	return ws
}

// wsState is what the long-lived connection tests put in the cluster, in
// namespace apps: the Service ws, whose EndpointSlice lists the WebSocket
// backends that are up (Pods on their own loopback addresses and one
// port); the Service app, a plain HTTP backend; the Ingress ws, routing
// ws.example and the extra hosts to ws and app.example to app, with its
// annotations; and with extra set, the Service of that name and the
// Ingress extra routing extra.example to it.
type wsState struct {
	up          []*testkit.WSEcho
	wsPort      int
	app         string // the app backend's "127.0.0.1:port"
	hosts       []string
	annotations map[string]string
	extra       string
}

// newWSState is the state with every backend of echoes up and the app
// backend app.
func newWSState(t testing.TB, echoes []*testkit.WSEcho, app string) wsState {
	t.Helper()
	_, port := splitAddr(t, echoes[0].Addr)
	return wsState{up: echoes, wsPort: port, app: app}
}

func (s wsState) objects(t testing.TB) []librarytest.Object {
	t.Helper()
	const ns = "apps"
	var addrs []string
	for _, e := range s.up {
		host, _ := splitAddr(t, e.Addr)
		addrs = append(addrs, host)
	}
	appHost, appPort := splitAddr(t, s.app)
	rules := []librarytest.IngressRule{
		{Host: "ws.example", Path: "/", Service: "ws", Port: 80},
		{Host: "app.example", Path: "/", Service: "app", Port: 80},
	}
	for _, h := range s.hosts {
		rules = append(rules, librarytest.IngressRule{Host: h, Path: "/", Service: "ws", Port: 80})
	}
	objs := []librarytest.Object{
		librarytest.Service(ns, "ws", 80, s.wsPort),
		librarytest.EndpointSlice(ns, "ws-1", "ws", s.wsPort, addrs...),
		librarytest.Service(ns, "app", 80, appPort),
		librarytest.EndpointSlice(ns, "app-1", "app", appPort, appHost),
		librarytest.Ingress(ns, "ws", s.annotations, rules...),
	}
	if s.extra != "" {
		objs = append(objs,
			librarytest.Service(ns, s.extra, 80, 80),
			librarytest.Ingress(ns, "extra", nil, librarytest.IngressRule{Host: "extra.example", Path: "/", Service: s.extra, Port: 80}))
	}
	return objs
}

// wsBackend is the name the ingress library gives the backend of the
// Service ws of the Ingress ws.
const wsBackend = "ing_apps_ws_ws_80"

// startHTTPBackend starts an HTTP server on 127.0.0.1 that answers every
// request with 200 "app", until the test ends, and returns its address.
func startHTTPBackend(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "app")
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// without is echoes but gone.
func without(echoes []*testkit.WSEcho, gone *testkit.WSEcho) []*testkit.WSEcho {
	return slices.DeleteFunc(slices.Clone(echoes), func(e *testkit.WSEcho) bool { return e == gone })
}

func splitAddr(t testing.TB, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}

// slotState is a server slot of a backend as the Runtime API shows it.
type slotState struct {
	addr string // "ip:port"
	// maint: the slot is in maintenance (srv_admin_state has the forced
	// maintenance bit): it gets no new connection.
	maint bool
	// sessions are the connections the slot holds (show stat scur).
	sessions int
}

// slots is every server slot of backend, by name, read from "show servers
// state" and "show stat".
func (r *rig) slots(backend string) map[string]slotState {
	r.tb.Helper()
	out := map[string]slotState{}
	for line := range strings.SplitSeq(r.adminDo("show servers state "+backend), "\n") {
		// be_id be_name srv_id srv_name srv_addr srv_op_state
		// srv_admin_state ... srv_port (19th)
		f := strings.Fields(line)
		if len(f) < 19 || strings.HasPrefix(line, "#") {
			continue
		}
		admin, err := strconv.Atoi(f[6])
		if err != nil {
			r.tb.Fatalf("show servers state: %q: %v", line, err)
		}
		out[f[3]] = slotState{addr: net.JoinHostPort(f[4], f[18]), maint: admin&1 != 0}
	}
	for line := range strings.SplitSeq(r.adminDo("show stat"), "\n") {
		// pxname,svname,qcur,qmax,scur,...
		f := strings.Split(line, ",")
		if len(f) < 5 || f[0] != backend {
			continue
		}
		s, ok := out[f[1]]
		if !ok {
			continue // BACKEND
		}
		n, err := strconv.Atoi(f[4])
		if err != nil {
			r.tb.Fatalf("show stat: %q: %v", line, err)
		}
		s.sessions = n
		out[f[1]] = s
	}
	if len(out) == 0 {
		r.tb.Fatalf("backend %s has no servers", backend)
	}
	return out
}

// slotName is the name of the n-th server slot (1-based).
func slotName(n int) string { return fmt.Sprintf("SRV_%d", n) }
