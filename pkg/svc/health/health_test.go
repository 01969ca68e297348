package health_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/svc/health"
)

func TestEndpoints(t *testing.T) {
	c := health.NewChecks()
	reg := prometheus.NewRegistry()
	g := prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_test_things_total", Help: "x"})
	reg.MustRegister(g, c)
	g.Inc()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- health.Serve(ctx, "127.0.0.1:0", c.Handler(reg), func(a net.Addr) { addr <- a }) }()
	base := "http://" + (<-addr).String()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	connected := true
	c.Func("nats", func() error {
		if !connected {
			return errors.New("not connected")
		}
		return nil
	})
	c.Pending("renderer")
	steps := []struct {
		name    string
		act     func()
		path    string
		code    int
		bodyHas string
	}{
		{"alive while not ready", func() {}, "/healthz", 200, "ok"},
		{"not ready until the check passes", func() {}, "/readyz", 503, `"renderer":"not ready yet"`},
		{"a pending check is 0 in weft_ready", func() {}, "/metrics", 200, `weft_ready{check="renderer"} 0`},
		{"a passing function check is 1 in weft_ready", func() {}, "/metrics", 200, `weft_ready{check="nats"} 1`},
		{"ready", func() { c.Set("renderer", nil) }, "/readyz", 200, `"ready":true`},
		{"a passing check is 1 in weft_ready", func() {}, "/metrics", 200, `weft_ready{check="renderer"} 1`},
		{"function check", func() { connected = false }, "/readyz", 503, `"nats":"not connected"`},
		{"a failing function check is 0 in weft_ready", func() {}, "/metrics", 200, `weft_ready{check="nats"} 0`},
		{"metrics", func() {}, "/metrics", 200, "weft_test_things_total 1"},
	}
	for _, st := range steps {
		st.act()
		code, body := get(st.path)
		if code != st.code || !strings.Contains(body, st.bodyHas) {
			t.Errorf("%s: %s = %d %q, want %d with %q", st.name, st.path, code, body, st.code, st.bodyHas)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop")
	}
}
