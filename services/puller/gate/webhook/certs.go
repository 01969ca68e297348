package webhook

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// recheck is how often, at most, the certificate files are looked at.
const recheck = time.Second

// certFiles serves the certificate of a pair of files, read again when
// either file changes (size or modification time, through symlinks as a
// mounted Secret updates them). A changed pair that does not load is
// reported and the last good certificate kept.
type certFiles struct {
	cert, key string
	log       *slog.Logger
	failed    prometheus.Counter

	mu      sync.Mutex
	current *tls.Certificate
	stamp   string // of the files current was read from
	badAt   string // stamp of files that failed to load, reported once
	checked time.Time
}

func (c *certFiles) load() error {
	stamp, err := c.stampNow()
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return fmt.Errorf("load the serving certificate %s and key %s: %w", c.cert, c.key, err)
	}
	c.current, c.stamp, c.checked = &pair, stamp, time.Now()
	return nil
}

func (c *certFiles) stampNow() (string, error) {
	var s string
	for _, p := range []string{c.cert, c.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("serving certificate: %w", err)
		}
		s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

func (c *certFiles) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}

// get returns the current certificate, reading the files again when they
// changed since the last look (at most once per recheck).
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < recheck {
		return c.current, nil
	}
	c.checked = time.Now()
	stamp, err := c.stampNow()
	if err != nil || stamp == c.stamp || stamp == c.badAt {
		if err != nil && c.badAt != err.Error() {
			c.badAt = err.Error()
			c.failed.Inc()
			c.log.Error("webhook: the serving certificate files are unreadable; serving the last one read", "err", err)
		}
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		c.badAt = stamp
		c.failed.Inc()
		c.log.Error("webhook: the changed serving certificate does not load; serving the last one read", "cert", c.cert, "key", c.key, "err", err)
		return c.current, nil
	}
	c.current, c.stamp, c.badAt = &pair, stamp, ""
	c.log.Info("webhook: serving certificate read again", "cert", c.cert)
	return c.current, nil
}
