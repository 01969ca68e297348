package webhook_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/webhook"
)

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
	testkit.WriteServingCert(t, certFile, keyFile, 1)
	addr := testkit.FreeAddr(t)
	s, err := webhook.New(view, webhook.Options{Addr: addr, CertFile: certFile, KeyFile: keyFile}, logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, s.Run)
	want := func(serial int64) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			got, err := testkit.ServedSerial(addr)
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
	testkit.WriteServingCert(t, certFile, keyFile, 2)
	want(2)

	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, err := testkit.ServedSerial(addr); err != nil {
			return err
		}
		if n := testkit.LabeledValue(t, reg, "weft_puller_gate_webhook_errors_total", map[string]string{"reason": "certificate"}); n != 1 {
			return fmt.Errorf("certificate errors %v, want 1", n)
		}
		return nil
	})
	want(2)
	testkit.WriteServingCert(t, certFile, keyFile, 3)
	want(3)
}
