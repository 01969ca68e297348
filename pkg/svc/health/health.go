// Package health serves /healthz (the process is alive), /readyz (every
// registered readiness check passes) and /metrics for one process. Checks are
// registered by name; a service marks itself not ready until, for example,
// its initial sync is done. Checks is also a prometheus.Collector of
// weft_ready{check}: the same answers as /readyz, for alerting.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrNotReady is the state of a check that has not reported yet.
var ErrNotReady = errors.New("not ready yet")

// Checks is a set of named readiness checks, safe for concurrent use.
type Checks struct {
	mu    sync.RWMutex
	state map[string]error
	funcs map[string]func() error
}

// NewChecks returns an empty set (ready, until a check is added).
func NewChecks() *Checks {
	return &Checks{state: map[string]error{}, funcs: map[string]func() error{}}
}

// Set records the state of a named check: nil is ready.
func (c *Checks) Set(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state[name] = err
}

// Pending registers a check as not ready until Set(name, nil).
func (c *Checks) Pending(name string) { c.Set(name, ErrNotReady) }

// Func registers a check evaluated on every /readyz request.
func (c *Checks) Func(name string, f func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.funcs[name] = f
}

// Remove drops a check (a service that stopped).
func (c *Checks) Remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.state, name)
	delete(c.funcs, name)
}

// Failing returns the failing checks by name.
func (c *Checks) Failing() map[string]string {
	out := map[string]string{}
	for n, err := range c.states() {
		if err != nil {
			out[n] = err.Error()
		}
	}
	return out
}

// states evaluates every check: its error by name, nil when it passes.
func (c *Checks) states() map[string]error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]error, len(c.state)+len(c.funcs))
	for n, err := range c.state {
		out[n] = err
	}
	for n, f := range c.funcs {
		out[n] = f()
	}
	return out
}

// readyDesc is the metric a Checks exports as a prometheus.Collector.
var readyDesc = prometheus.NewDesc("weft_ready",
	"1 when the named readiness check passes, 0 when it fails: what /readyz answers, check by check.",
	[]string{"check"}, nil)

// Describe implements prometheus.Collector: Checks exports weft_ready{check}.
func (c *Checks) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

// Collect implements prometheus.Collector: one weft_ready sample per check,
// evaluated as /readyz evaluates it.
func (c *Checks) Collect(ch chan<- prometheus.Metric) {
	for n, err := range c.states() {
		v := 1.0
		if err != nil {
			v = 0
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, n)
	}
}

// Ready returns nil when every check passes.
func (c *Checks) Ready() error {
	failing := c.Failing()
	if len(failing) == 0 {
		return nil
	}
	names := make([]string, 0, len(failing))
	for n := range failing {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("not ready: %v", names)
}

// Handler serves /healthz, /readyz and /metrics (from g).
func (c *Checks) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		failing := c.Failing()
		w.Header().Set("Content-Type", "application/json")
		if len(failing) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": len(failing) == 0, "failing": failing})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}

// Serve listens on addr and serves h until ctx is done. It reports the bound
// address through bound (useful with ":0"), if not nil.
func Serve(ctx context.Context, addr string, h http.Handler, bound func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health: listen %s: %w", addr, err)
	}
	if bound != nil {
		bound(ln.Addr())
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("health: serve: %w", err)
	}
}
