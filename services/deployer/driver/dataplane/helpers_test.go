package dataplane_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer/driver/dataplane"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// newDouble starts a Dataplane API double that checks configurations with
// the real haproxy.
func newDouble(t *testing.T) *dataplanetest.Server {
	t.Helper()
	return dataplanetest.New(t, dataplanetest.Options{HAProxy: testkit.HAProxy(t)})
}

func newDriver(t *testing.T, s *dataplanetest.Server, mod func(*dataplane.Options)) *dataplane.Driver {
	t.Helper()
	opts := dataplane.Options{
		URL: s.URL(), User: s.User(), Password: s.Password(),
		PollInterval: 5 * time.Millisecond, ReloadTimeout: 5 * time.Second,
	}
	if mod != nil {
		mod(&opts)
	}
	d, err := dataplane.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// site describes a bundle: the configuration is built from it with the
// double's storage paths.
type site struct {
	// servers of be_app, one line each after "server".
	servers []string
	// extra backends, by name, each with one server.
	backends []string
	hostMap  string
	// regMap, when set, is a map used with map_reg (order matters).
	regMap  string
	errPage string
	cert    []byte
	// extraLine is added to the frontend.
	extraLine string
}

func (c site) bundle(dir string) []dataplane.File {
	var b strings.Builder
	b.WriteString(dataplanetest.DefaultConfig)
	fmt.Fprintf(&b, "\nfrontend fe\n    bind 127.0.0.1:18080\n")
	if c.cert != nil {
		fmt.Fprintf(&b, "    bind 127.0.0.1:18443 ssl crt %s\n", filepath.Join(dir, "certs", "site.pem"))
	}
	fmt.Fprintf(&b, "    use_backend %%[req.hdr(host),lower,map(%s,be_app)]\n", filepath.Join(dir, "maps", "host.map"))
	if c.regMap != "" {
		fmt.Fprintf(&b, "    http-request set-var(txn.r) path,map_reg(%s,none)\n", filepath.Join(dir, "maps", "paths.map"))
	}
	if c.extraLine != "" {
		b.WriteString("    " + c.extraLine + "\n")
	}
	b.WriteString("    default_backend be_app\n\nbackend be_app\n")
	if c.errPage != "" {
		fmt.Fprintf(&b, "    errorfile 503 %s\n", filepath.Join(dir, "files", "503.http"))
	}
	for _, s := range c.servers {
		b.WriteString("    server " + s + "\n")
	}
	for _, be := range c.backends {
		fmt.Fprintf(&b, "\nbackend %s\n    server s1 127.0.0.1:9000\n", be)
	}
	files := []dataplane.File{
		{Path: "haproxy.cfg", Content: []byte(b.String())},
		{Path: "maps/host.map", Content: []byte(c.hostMap)},
	}
	if c.regMap != "" {
		files = append(files, dataplane.File{Path: "maps/paths.map", Content: []byte(c.regMap)})
	}
	if c.errPage != "" {
		files = append(files, dataplane.File{Path: "files/503.http", Content: []byte(c.errPage)})
	}
	if c.cert != nil {
		files = append(files, dataplane.File{Path: "certs/site.pem", Content: c.cert})
	}
	return files
}

// selfSigned returns a PEM certificate with its key.
func selfSigned(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     []string{cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})...)
}

// golden compares got with testdata/<name>.golden, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs:\n--- want\n%s--- got\n%s", file, want, got)
	}
}

// summary is the part of a Result that does not depend on the run.
func summary(r dataplane.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "written: %s\nremoved: %s\nunchanged: %d\nreloaded: %v\nreason: %s\n",
		strings.Join(r.Written, " "), strings.Join(r.Removed, " "), r.Unchanged, r.Reloaded, r.ReloadReason)
	for _, op := range r.RuntimeOps {
		b.WriteString("op: " + op + "\n")
	}
	return b.String()
}
