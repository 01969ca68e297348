package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifySocket listens where systemd would for a Type=notify service: a
// Unix datagram socket, one state list per datagram.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	out := make(chan string, 1000)
	go func() {
		defer close(out)
		buf := make([]byte, 4096)
		for {
			n, _, err := c.ReadFromUnix(buf)
			if err != nil {
				return
			}
			out <- string(buf[:n])
		}
	}()
	return path, out
}

// filesConfig is a weft.yaml delivering one target, rendered from a
// folder of manifests, into out/ with the files driver.
const filesConfig = `sources:
  - {name: m, type: manifests, path: manifests}
watched_resources:
  services: {api_version: v1, kind: Service}
targets:
  edge:
    validate: {kinds: [template]}
    haproxy_config:
      template: |
        {%- for _, s in resources.services.items() %}
        # {{ s.metadata.name }}
        {%- endfor %}
    deploy: {driver: files, dest: out}
`

// TestUpNotifiesSystemd: weft up started by systemd as Type=notify says
// READY=1 only once the target is deployed, STATUS= lines before and with
// it, pets the watchdog every half WATCHDOG_USEC, and says STOPPING=1 when
// stopped.
func TestUpNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "svc.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata: {namespace: default, name: web}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weft.yaml"), []byte(filesConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	socket, states := notifySocket(t)
	w := startWeftEnv(t, []string{"NOTIFY_SOCKET=" + socket, "WATCHDOG_USEC=1000000"},
		"up", "--config", filepath.Join(dir, "weft.yaml"), "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	next := func() string {
		t.Helper()
		select {
		case s := <-states:
			return s
		case <-time.After(2 * time.Minute):
			t.Fatal("no notification within 2 minutes")
			return ""
		}
	}
	var before []string
	for s := next(); ; s = next() {
		if !strings.Contains(s, "READY=1") {
			before = append(before, s)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "out", "haproxy.cfg")); err != nil {
			t.Fatalf("READY=1 before the deploy: %v", err)
		}
		if !strings.Contains(s, "STATUS=ready: 1 deployed (edge)") {
			t.Errorf("READY=1 came with %q", s)
		}
		break
	}
	if !strings.Contains(strings.Join(before, "\n"), "STATUS=started; waiting for the first deploy of every target") {
		t.Errorf("before READY=1: %q", before)
	}
	pets := 0
	for pets < 3 {
		if s := next(); s == "WATCHDOG=1" {
			pets++
		} else if strings.Contains(s, "READY=1") {
			t.Fatalf("READY=1 again: %q", s)
		}
	}
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft exited with %v", err)
	}
	for s := next(); !strings.Contains(s, "STOPPING=1"); s = next() {
	}
}
