//go:build linux

package runtime

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/testkit"
)

// sockPrefix names the folders holding the sockets of the HAProxy processes
// this test binary starts; TestMain looks for processes still using one.
var sockPrefix = fmt.Sprintf("weft-rt-%d-", os.Getpid())

func TestMain(m *testing.M) {
	code := m.Run()
	if left := leftoverHAProxy(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "haproxy processes left running: %v\n", left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// leftoverHAProxy returns the live processes whose command line names one of
// this binary's socket folders.
func leftoverHAProxy() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(sockPrefix)) {
			continue
		}
		if !isZombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func isZombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(s[i+1:], " Z")
}

// backendSpec is a backend section: its name and its lines.
type backendSpec struct {
	name  string
	lines []string
}

// spec describes a test bundle; rig.bundle turns it into files.
type spec struct {
	backends []backendSpec
	hostMap  string
	pathMap  string
	pfxMap   string
	cert     []byte
	errPage  string
	comment  string // a comment line added to the configuration
	// global and defaults are lines added to those sections.
	global, defaults []string
	extra            []File
}

func (s spec) clone() spec {
	c := s
	c.backends = make([]backendSpec, len(s.backends))
	for i, b := range s.backends {
		c.backends[i] = backendSpec{name: b.name, lines: slices.Clone(b.lines)}
	}
	c.extra = slices.Clone(s.extra)
	c.global, c.defaults = slices.Clone(s.global), slices.Clone(s.defaults)
	return c
}

// backend returns the lines of a backend, for a change to edit.
func (s *spec) backend(name string) *backendSpec {
	for i := range s.backends {
		if s.backends[i].name == name {
			return &s.backends[i]
		}
	}
	panic("no backend " + name)
}

// rig is one HAProxy in master-worker mode on loopback, four echo backends
// answering with their names, and a Driver for its folder.
type rig struct {
	tb                testing.TB
	haproxy           string // the binary
	dir               string
	master, admin     string
	logPath           string
	httpPort, tlsPort int
	echo              map[string]string // name -> 127.0.0.1:port
	certOne, certTwo  []byte
	client            *http.Client
	drv               *Driver
}

// newRig starts the echo backends and HAProxy with the bundle of s, and a
// Driver that has adopted it.
func newRig(tb testing.TB, s func(r *rig) spec, opts ...func(*Options)) *rig {
	tb.Helper()
	return newRigFiles(tb, func(r *rig) []File { return r.bundle(s(r)) }, opts...)
}

// newRigFiles is newRig for a bundle given as files, for the rig's folder,
// ports and admin socket.
func newRigFiles(tb testing.TB, bundle func(r *rig) []File, opts ...func(*Options)) *rig {
	tb.Helper()
	haproxy := testkit.HAProxy(tb)
	sockDir, err := os.MkdirTemp("", sockPrefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	r := &rig{
		tb:      tb,
		haproxy: haproxy,
		dir:     filepath.Join(sockDir, "haproxy"),
		master:  filepath.Join(sockDir, "master.sock"),
		admin:   filepath.Join(sockDir, "admin.sock"),
		logPath: filepath.Join(sockDir, "haproxy.log"),
		echo:    map[string]string{},
		certOne: selfSigned(tb, "one"),
		certTwo: selfSigned(tb, "two"),
		client: &http.Client{
			Transport: &http.Transport{DisableKeepAlives: true},
			Timeout:   10 * time.Second,
		},
	}
	tb.Cleanup(r.client.CloseIdleConnections)
	// Not tb.TempDir: HAProxy's configuration cannot name a path with
	// the commas a subtest's name may add to it.
	if err := os.Mkdir(r.dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, name := range []string{"A", "B", "C", "D"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, name)
		}))
		tb.Cleanup(srv.Close)
		r.echo[name] = srv.Listener.Addr().String()
	}

	// The ports are picked free, but something else may take one before
	// HAProxy binds it: then try other ones.
	var initial []File
	for attempt := 1; ; attempt++ {
		r.httpPort, r.tlsPort = testkit.FreePort(tb), testkit.FreePort(tb)
		initial = bundle(r)
		for _, f := range initial {
			p := filepath.Join(r.dir, filepath.FromSlash(f.Path))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				tb.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if f.Secret {
				mode = 0o600 // as the driver delivers key material
			}
			if err := os.WriteFile(p, f.Content, mode); err != nil {
				tb.Fatal(err)
			}
			if err := os.Chmod(p, mode); err != nil {
				tb.Fatal(err)
			}
		}
		err := r.start()
		if err == nil {
			break
		}
		if attempt == 5 {
			tb.Fatal(err)
		}
	}

	o := Options{Dir: r.dir, MasterSocket: r.master, AdminSocket: r.admin, ReloadTimeout: 20 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	r.drv, err = New(o)
	if err != nil {
		tb.Fatal(err)
	}
	res, err := r.drv.Apply(tb.Context(), initial)
	if err != nil {
		tb.Fatalf("adopting the initial bundle: %v", err)
	}
	if res.Reloaded || len(res.Written) > 0 || res.Unchanged != len(initial) {
		tb.Fatalf("adopting the initial bundle: %+v, want nothing written and no reload", res)
	}
	return r
}

// baseSpec: host routing through maps/host.map, path routing through
// maps/path.map (map_reg: the first match wins) and maps/prefix.map
// (map_beg: the longest match wins), a TLS frontend, and backends with
// pre-allocated disabled slots.
func baseSpec(r *rig) spec {
	return spec{
		backends: []backendSpec{
			{name: "be_default", lines: []string{"server SRV_1 " + r.echo["A"]}},
			{name: "be_app", lines: []string{
				"balance roundrobin",
				"server SRV_1 " + r.echo["B"],
				"server SRV_2 127.0.0.1:1 disabled",
				"server SRV_3 127.0.0.1:1 disabled",
			}},
			{name: "be_other", lines: []string{"server SRV_1 " + r.echo["C"]}},
			{name: "be_static", lines: []string{"balance source", "server SRV_1 " + r.echo["D"] + " weight 1"}},
			{name: "be_down", lines: []string{"server SRV_1 127.0.0.1:1 disabled"}},
		},
		hostMap: "app.example be_app\nother.example be_other\nstatic.example be_static\ndown.example be_down\n",
		pathMap: "^/api/v1 be_other\n^/api be_app\n",
		pfxMap:  "/p/v1 be_other\n/p be_app\n",
		cert:    r.certOne,
		errPage: "HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n\r\nmaintenance one\n",
	}
}

func (r *rig) bundle(s spec) []File {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    stats socket %s mode 660 level admin expose-fd listeners
    stats timeout 1m
%s
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    errorfile 503 %s/files/503.http
%s
frontend web
    bind 127.0.0.1:%d
    use_backend %%[path,map_reg(%s/maps/path.map)] if { path,map_reg(%s/maps/path.map) -m found }
    use_backend %%[path,map_beg(%s/maps/prefix.map)] if { path,map_beg(%s/maps/prefix.map) -m found }
    use_backend %%[req.hdr(host),lower,map(%s/maps/host.map,be_default)]

frontend tls
    bind 127.0.0.1:%d ssl crt %s/certs/site.pem
    default_backend be_default
`, r.admin, indented(s.global), r.dir, indented(s.defaults), r.httpPort, r.dir, r.dir, r.dir, r.dir, r.dir, r.tlsPort, r.dir)
	if s.comment != "" {
		fmt.Fprintf(&b, "    # %s\n", s.comment)
	}
	for _, be := range s.backends {
		fmt.Fprintf(&b, "\nbackend %s\n", be.name)
		for _, l := range be.lines {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	files := []File{
		{Path: "haproxy.cfg", Content: []byte(b.String())},
		{Path: "maps/host.map", Content: []byte(s.hostMap)},
		{Path: "maps/path.map", Content: []byte(s.pathMap)},
		{Path: "maps/prefix.map", Content: []byte(s.pfxMap)},
		{Path: "certs/site.pem", Content: s.cert, Secret: true},
		{Path: "files/503.http", Content: []byte(s.errPage)},
	}
	return append(files, s.extra...)
}

// indented returns lines as section lines, each ending with a newline.
func indented(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// errPortTaken: HAProxy could not bind one of the ports picked for it, which
// another process took in the meantime.
var errPortTaken = errors.New("port taken")

// start runs HAProxy on the folder's configuration and waits until its
// worker answers on the admin socket.
func (r *rig) start() error {
	r.tb.Helper()
	logf, err := os.Create(r.logPath)
	if err != nil {
		r.tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(r.haproxy, "-W", "-db", "-f", filepath.Join(r.dir, "haproxy.cfg"), "-S", r.master)
	// Not in r.dir, which a test may remove with HAProxy running.
	cmd.Dir = filepath.Dir(r.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.tb.Fatalf("start haproxy: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.tb.Cleanup(func() { r.stop(cmd, exited) })

	deadline := time.Now().Add(15 * time.Second)
	master := sockClient{path: r.master, timeout: time.Second}
	admin := sockClient{path: r.admin, timeout: time.Second}
	for {
		out, err := master.do(r.tb.Context(), "show proc")
		if err == nil {
			if st, perr := parseShowProc(out); perr == nil && len(st.workers) == 1 {
				info, err := admin.do(r.tb.Context(), "show info")
				if err == nil && infoPid(info) == st.workers[0] {
					return nil
				}
			}
		}
		select {
		case <-exited:
			if log := r.haproxyLog(); strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w:\n%s", errPortTaken, log)
			}
			r.tb.Fatalf("haproxy exited at start:\n%s", r.haproxyLog())
		default:
		}
		if time.Now().After(deadline) {
			r.tb.Fatalf("haproxy did not start: %v\n%s", err, r.haproxyLog())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends HAProxy: SIGTERM to the master (which stops its workers), then
// SIGKILL to the whole process group, so that nothing it started survives.
func (r *rig) stop(cmd *exec.Cmd, exited chan struct{}) {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		r.tb.Errorf("haproxy master %d ignored SIGTERM", pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.tb.Errorf("kill haproxy process group: %v", err)
	}
	<-exited
	if r.tb.Failed() {
		r.tb.Logf("haproxy log:\n%s", r.haproxyLog())
	}
}

func (r *rig) haproxyLog() string {
	b, _ := os.ReadFile(r.logPath)
	return string(b)
}

// apply runs Apply and fails the test on error.
func (r *rig) apply(files []File) Result {
	r.tb.Helper()
	res, err := r.drv.Apply(r.tb.Context(), files)
	if err != nil {
		r.tb.Fatalf("Apply: %v (result %+v)\n%s", err, res, r.haproxyLog())
	}
	return res
}

// reloads reads the master's reload counter with show proc.
func (r *rig) reloads() int {
	r.tb.Helper()
	st := r.proc()
	return st.reloads
}

func (r *rig) proc() procState {
	r.tb.Helper()
	ctx, cancel := context.WithTimeout(r.tb.Context(), 10*time.Second)
	defer cancel()
	st, err := r.drv.procState(ctx)
	if err != nil {
		r.tb.Fatalf("show proc: %v", err)
	}
	return st
}

// adminDo runs a command on the admin socket.
func (r *rig) adminDo(cmd string) string {
	r.tb.Helper()
	out, err := sockClient{path: r.admin, timeout: 5 * time.Second}.do(r.tb.Context(), cmd)
	if err != nil {
		r.tb.Fatalf("%s: %v", cmd, err)
	}
	return out
}

// get sends a request for host and path through HAProxy and returns the
// body, or "status N: body" for an answer other than 200.
func (r *rig) get(host, path string) string {
	r.tb.Helper()
	req, err := http.NewRequestWithContext(r.tb.Context(), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", r.httpPort, path), nil)
	if err != nil {
		r.tb.Fatal(err)
	}
	req.Host = host
	resp, err := r.client.Do(req)
	if err != nil {
		r.tb.Fatalf("GET %s%s: %v", host, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.tb.Fatalf("GET %s%s: %v", host, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return string(body)
}

// spread sends n requests for host and counts the answers.
func (r *rig) spread(host string, n int) map[string]int {
	r.tb.Helper()
	out := map[string]int{}
	for range n {
		out[r.get(host, "/")]++
	}
	return out
}

// certCN returns the common name of the certificate the TLS frontend serves.
func (r *rig) certCN() string {
	r.tb.Helper()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, ServerName: "site.example"}}
	conn, err := d.DialContext(r.tb.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", r.tlsPort))
	if err != nil {
		r.tb.Fatalf("TLS handshake: %v", err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		r.tb.Fatal("no certificate served")
	}
	return certs[0].Subject.CommonName
}

// runningState is what the worker runs, as the Runtime API shows it: every
// server's address, port, weight and operational state, the entries of the
// maps (in order for path.map, whose order matters) and the served
// certificate.
type runningState struct {
	servers []string
	hostMap []string
	pathMap []string
	pfxMap  []string
	cert    string
}

func (r *rig) running() runningState {
	r.tb.Helper()
	var st runningState
	for line := range strings.SplitSeq(r.adminDo("show servers state"), "\n") {
		f := strings.Fields(line)
		// be_id be_name srv_id srv_name srv_addr srv_op_state
		// srv_admin_state srv_uweight ... srv_port (19th)
		if len(f) < 19 || strings.HasPrefix(line, "#") {
			continue
		}
		st.servers = append(st.servers, fmt.Sprintf("%s/%s %s:%s weight %s op %s", f[1], f[3], f[4], f[18], f[7], f[5]))
	}
	st.hostMap = r.mapEntries("maps/host.map")
	slices.Sort(st.hostMap)
	st.pathMap = r.mapEntries("maps/path.map")
	st.pfxMap = r.mapEntries("maps/prefix.map")
	slices.Sort(st.pfxMap)
	st.cert = r.certCN()
	return st
}

func (r *rig) mapEntries(rel string) []string {
	r.tb.Helper()
	var out []string
	for line := range strings.SplitSeq(r.adminDo("show map "+filepath.Join(r.dir, rel)), "\n") {
		_, entry, ok := strings.Cut(line, " ") // drop the entry's address
		if ok {
			out = append(out, entry)
		}
	}
	return out
}

// forceReload reloads HAProxy through the driver, so that it loads
// everything from disk.
func (r *rig) forceReload() {
	r.tb.Helper()
	ctx, cancel := context.WithTimeout(r.tb.Context(), 20*time.Second)
	defer cancel()
	if _, err := r.drv.reload(ctx); err != nil {
		r.tb.Fatalf("reload: %v\n%s", err, r.haproxyLog())
	}
}

func (r *rig) read(p string) string {
	r.tb.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, filepath.FromSlash(p)))
	if err != nil {
		r.tb.Fatal(err)
	}
	return string(b)
}

func (r *rig) exists(p string) bool {
	_, err := os.Lstat(filepath.Join(r.dir, filepath.FromSlash(p)))
	return !errors.Is(err, fs.ErrNotExist)
}

func (r *rig) manifest() manifest {
	r.tb.Helper()
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		r.tb.Fatal(err)
	}
	defer root.Close()
	m, _, err := readManifest(root)
	if err != nil {
		r.tb.Fatal(err)
	}
	return m
}

func (r *rig) port(name string) string {
	_, p, _ := net.SplitHostPort(r.echo[name])
	return p
}

// selfSigned returns a PEM certificate and key for cn.
func selfSigned(tb testing.TB, cn string) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     []string{"site.example"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	// An empty line between the blocks, as many tools write them: it must
	// not end the CLI payload.
	b.WriteString("\n")
	_ = pem.Encode(&b, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return b.Bytes()
}
