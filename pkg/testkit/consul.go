package testkit

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ConsulBinary returns the path of a consul agent built from its Go module
// by hack/consul/build.sh, at the version its go.mod pins, into
// ${WEFT_CACHE:-$HOME/.cache/weft}/consul/<version> the first time (about
// four minutes on a cold Go cache) and taken from there afterwards. `make
// deps` builds it. $WEFT_CONSUL names a binary to use instead.
func ConsulBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("WEFT_CONSUL"); bin != "" {
		return bin
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the testkit source to find hack/consul")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "consul", "build.sh")
	cmd := exec.Command(script)
	var stderr SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build consul with %s: %v\n%s", script, err, stderr.String())
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "consul")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s did not build consul: %v", script, err)
	}
	return bin
}

// Consul is a consul agent in development mode (a single server, its own
// leader, data in memory: a restart empties it) on 127.0.0.1, with DNS and
// gRPC turned off.
type Consul struct {
	*Server
	// Addr is the HTTP API's host:port.
	Addr string
	// Token, when the agent was started with ACLs, is the management token
	// requests are made with.
	Token string
}

// ConsulOption adjusts the agent StartConsul starts.
type ConsulOption func(*consulOptions)

type consulOptions struct {
	hcl   []string
	token string
}

// WithConsulACLs turns ACLs on with the default policy deny, with
// management as the management token.
func WithConsulACLs(management string) ConsulOption {
	return func(o *consulOptions) {
		o.token = management
		o.hcl = append(o.hcl, fmt.Sprintf(`acl { enabled = true default_policy = "deny" tokens { initial_management = %q } }`, management))
	}
}

// StartConsul starts a consul agent -dev and waits until it has a leader.
func StartConsul(t testing.TB, opts ...ConsulOption) *Consul {
	t.Helper()
	var o consulOptions
	for _, opt := range opts {
		opt(&o)
	}
	bin := ConsulBinary(t)
	httpPort := FreePort(t)
	args := []string{bin, "agent", "-dev", "-client", "127.0.0.1", "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(httpPort), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		"-serf-lan-port", strconv.Itoa(FreePort(t)), "-serf-wan-port", strconv.Itoa(FreePort(t)),
		"-server-port", strconv.Itoa(FreePort(t)), "-log-level", "warn",
		"-data-dir", t.TempDir(),
	}
	for _, h := range o.hcl {
		args = append(args, "-hcl", h)
	}
	c := &Consul{Addr: "127.0.0.1:" + strconv.Itoa(httpPort), Token: o.token}
	c.Server = NewServer(t, "consul", c.leader, args...)
	c.Start()
	return c
}

// leader answers nil once the agent knows its leader.
func (c *Consul) leader() error {
	body, err := c.Do("GET", "/v1/status/leader", nil)
	if err != nil {
		return err
	}
	if strings.Trim(strings.TrimSpace(string(body)), `"`) == "" {
		return fmt.Errorf("no leader yet")
	}
	if c.Token != "" {
		// The ACL system takes a moment longer.
		if _, err := c.Do("GET", "/v1/acl/token/self", nil); err != nil {
			return err
		}
	}
	return nil
}

// Do makes one request of the HTTP API with Token, and returns the body
// of a 2xx answer.
func (c *Consul) Do(method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(method, "http://"+c.Addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("X-Consul-Token", c.Token)
	}
	// No connection is kept: tests check for leaked goroutines.
	req.Close = true
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(out))
	}
	return out, nil
}

// MustDo is Do that fails the test on error.
func (c *Consul) MustDo(t testing.TB, method, path string, body []byte) []byte {
	t.Helper()
	out, err := c.Do(method, path, body)
	if err != nil {
		t.Fatalf("consul: %v", err)
	}
	return out
}
