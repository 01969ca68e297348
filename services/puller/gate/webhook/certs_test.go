package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/webhook"
)

// writeCert writes a self-signed serving certificate for 127.0.0.1 with
// serial to certFile and keyFile.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "weft-puller"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Written beside and renamed into place, as a Secret volume updates.
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(path+".new", pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
}

func servedSerial(addr string) (int64, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the serial is what is checked
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// TestCertificateReload: the server serves a new certificate once its files
// change, and keeps the last good one (reporting the error) when the new
// files do not load; without a certificate it does not start.
func TestCertificateReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	reg := prometheus.NewRegistry()
	view := gate.NewView(nil, testTypes, logger(t))
	if _, err := webhook.New(view, webhook.Options{CertFile: certFile, KeyFile: keyFile}, logger(t), prometheus.NewRegistry()); err == nil {
		t.Fatal("a server started without its certificate files")
	}
	writeCert(t, certFile, keyFile, 1)
	addr := freeAddr(t)
	s, err := webhook.New(view, webhook.Options{Addr: addr, CertFile: certFile, KeyFile: keyFile}, logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, s.Run)
	want := func(serial int64) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			got, err := servedSerial(addr)
			if err != nil {
				return err
			}
			if got != serial {
				return fmt.Errorf("serving certificate %d, want %d", got, serial)
			}
			return nil
		})
	}
	want(1)
	writeCert(t, certFile, keyFile, 2)
	want(2)

	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, err := servedSerial(addr); err != nil {
			return err
		}
		if n := testkit.LabeledValue(t, reg, "weft_puller_gate_webhook_errors_total", map[string]string{"reason": "certificate"}); n != 1 {
			return fmt.Errorf("certificate errors %v, want 1", n)
		}
		return nil
	})
	want(2)
	writeCert(t, certFile, keyFile, 3)
	want(3)
}
