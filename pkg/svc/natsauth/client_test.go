package natsauth_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
)

func TestClientOptionsRefuseMixedSettings(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "x.nk")
	if _, err := natsauth.NKeyUsers(dir, []msg.Role{msg.RoleAuditor}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(natsauth.SeedFile(dir, msg.RoleAuditor), seed); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(bad, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    natsauth.Client
		ok   bool
	}{
		{"nothing", natsauth.Client{}, true},
		{"an nkey", natsauth.Client{NKey: seed}, true},
		{"a user and password", natsauth.Client{User: "u", Password: "p"}, true},
		{"an nkey and a user", natsauth.Client{NKey: seed, User: "u", Password: "p"}, false},
		{"creds and an nkey", natsauth.Client{Creds: "x.creds", NKey: seed}, false},
		{"a user without password", natsauth.Client{User: "u"}, false},
		{"a seed that is none", natsauth.Client{NKey: bad}, false},
		{"a missing seed", natsauth.Client{NKey: filepath.Join(dir, "none.nk")}, false},
		{"a cert without key", natsauth.Client{TLSCert: "c.pem"}, false},
		{"a missing CA", natsauth.Client{TLSCA: filepath.Join(dir, "none.pem")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Options()
			if tt.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, natsauth.ErrSettings) {
				t.Fatalf("err = %v, want ErrSettings", err)
			}
		})
	}
}

// TestRefusalIsLogged: a publish the server refuses is an ERROR record
// naming the subject, not silence.
func TestRefusalIsLogged(t *testing.T) {
	s := testkit.NATSWithUsers(t, "")
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	opts, err := natsauth.Client{NKey: natsauth.SeedFile(s.Keys, msg.RoleRenderer)}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.URL, append(opts, natsauth.LogErrors(log, nil))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(msg.DeploySubject("edge", "main"), nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if out := buf.String(); !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, msg.DeploySubject("edge", "main")) {
			return fmt.Errorf("log: %q", out)
		}
		return nil
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate and key signed by ca, for the server
// (127.0.0.1) or a client, and returns their files.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLS: a server with a certificate of a test CA that verifies client
// certificates takes a client given the CA, its certificate and its role's
// nkey, and refuses one without the CA, one trusting another CA, and one
// without a client certificate.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "weft-test")
	srvCert, srvKey := ca.issue(t, dir, "server", true)
	cliCert, cliKey := ca.issue(t, dir, "client", false)
	other := newCA(t, dir, "other")
	s := testkit.NATSWithUsers(t, fmt.Sprintf("\ntls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n  timeout: 5\n}\n", srvCert, srvKey, ca.file))
	seed := natsauth.SeedFile(s.Keys, msg.RoleRenderer)

	connect := func(c natsauth.Client) error {
		opts, err := c.Options()
		if err != nil {
			return err
		}
		nc, err := nats.Connect(s.URL, append(opts, nats.Timeout(5*time.Second), nats.MaxReconnects(0))...)
		if err != nil {
			return err
		}
		defer nc.Close()
		if !nc.TLSRequired() {
			return errors.New("connected without TLS")
		}
		// A JetStream API request its user may make is answered.
		_, err = nc.Request("$JS.API.STREAM.INFO."+msg.StreamRenders, nil, 5*time.Second)
		return err
	}
	if err := connect(natsauth.Client{NKey: seed, TLSCA: ca.file, TLSCert: cliCert, TLSKey: cliKey}); err != nil {
		t.Fatalf("a client with the CA, a certificate and its nkey: %v", err)
	}
	refused := []struct {
		name string
		c    natsauth.Client
	}{
		{"without the CA", natsauth.Client{NKey: seed, TLSCert: cliCert, TLSKey: cliKey}},
		{"trusting another CA", natsauth.Client{NKey: seed, TLSCA: other.file, TLSCert: cliCert, TLSKey: cliKey}},
		{"without a client certificate", natsauth.Client{NKey: seed, TLSCA: ca.file}},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			err := connect(r.c)
			if err == nil {
				t.Fatal("connected")
			}
			if errors.Is(err, natsauth.ErrSettings) {
				t.Fatalf("refused by the settings, not the server: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
