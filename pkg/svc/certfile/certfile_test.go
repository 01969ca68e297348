package certfile_test

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/svc/certfile"
	"github.com/weftio/weft/pkg/testkit"
)

// TestReload: a server serves the new certificate once its files change,
// keeps the last good one (reported once) while the files do not load, and
// a pair that is missing at first is an error.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	log := slog.New(slog.DiscardHandler)
	if _, err := certfile.Load(certFile, keyFile, log, nil); err == nil {
		t.Fatal("a missing pair loaded")
	}
	testkit.WriteServingCert(t, certFile, keyFile, 1)
	var failed atomic.Int32
	p, err := certfile.Load(certFile, keyFile, log, func() { failed.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{TLSConfig: p.TLSConfig(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
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
		if n := failed.Load(); n != 1 {
			return fmt.Errorf("failures reported %d, want 1", n)
		}
		return nil
	})
	want(2)
	testkit.WriteServingCert(t, certFile, keyFile, 3)
	want(3)
	if n := failed.Load(); n != 1 {
		t.Fatalf("failures reported %d, want 1", n)
	}
}
