// Package certfile serves a TLS certificate from a pair of PEM files (a
// mounted Secret, cert-manager's), read again when either file changes:
// size or modification time, through symlinks as the kubelet updates a
// Secret volume, looked at most once a second. A changed pair that does
// not load is reported (log and the failed callback) once, and the last
// good certificate is served until the files load again.
package certfile

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Recheck is how often, at most, the files are looked at.
const Recheck = time.Second

// Pair is the certificate of one pair of files.
type Pair struct {
	cert, key string
	log       *slog.Logger
	failed    func()

	mu      sync.Mutex
	current *tls.Certificate
	stamp   string // of the files current was read from
	badAt   string // stamp (or error) of files that failed to load, reported once
	checked time.Time
}

// Load reads the pair once: a pair that does not load is an error. failed,
// if not nil, is called for every later change that does not load.
func Load(cert, key string, log *slog.Logger, failed func()) (*Pair, error) {
	if cert == "" || key == "" {
		return nil, fmt.Errorf("certfile: a certificate file and a key file are both needed (got %q and %q)", cert, key)
	}
	if failed == nil {
		failed = func() {}
	}
	p := &Pair{cert: cert, key: key, log: log, failed: failed}
	stamp, err := p.stampNow()
	if err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("certfile: load the certificate %s and key %s: %w", cert, key, err)
	}
	p.current, p.stamp, p.checked = &pair, stamp, time.Now()
	return p, nil
}

func (p *Pair) stampNow() (string, error) {
	var s string
	for _, f := range []string{p.cert, p.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("certfile: %w", err)
		}
		s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// TLSConfig is a server configuration (TLS 1.2 and later) serving the
// pair's current certificate.
func (p *Pair) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: p.Get}
}

// Get returns the current certificate, reading the files again when they
// changed since the last look.
func (p *Pair) Get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) < Recheck {
		return p.current, nil
	}
	p.checked = time.Now()
	stamp, err := p.stampNow()
	if err != nil || stamp == p.stamp || stamp == p.badAt {
		if err != nil && p.badAt != err.Error() {
			p.badAt = err.Error()
			p.failed()
			p.log.Error("the certificate files are unreadable; serving the last one read", "err", err)
		}
		return p.current, nil
	}
	pair, err := tls.LoadX509KeyPair(p.cert, p.key)
	if err != nil {
		p.badAt = stamp
		p.failed()
		p.log.Error("the changed certificate does not load; serving the last one read", "cert", p.cert, "key", p.key, "err", err)
		return p.current, nil
	}
	p.current, p.stamp, p.badAt = &pair, stamp, ""
	p.log.Info("certificate read again", "cert", p.cert)
	return p.current, nil
}
