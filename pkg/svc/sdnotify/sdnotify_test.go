package sdnotify_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/svc/sdnotify"
)

// listen opens a Unix datagram socket as systemd does for a service, at a
// path or (name starting with '@') in the abstract namespace, and returns
// the states it receives, one datagram each.
func listen(t *testing.T, name string) <-chan string {
	t.Helper()
	addr := name
	if strings.HasPrefix(name, "@") {
		addr = "\x00" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	out := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := c.ReadFromUnix(buf)
			if err != nil {
				close(out)
				return
			}
			out <- string(buf[:n])
		}
	}()
	return out
}

func receive(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no datagram")
		return ""
	}
}

func TestNotify(t *testing.T) {
	for _, tc := range []struct{ name, socket string }{
		{"path", filepath.Join(t.TempDir(), "notify")},
		{"abstract", fmt.Sprintf("@weft-sdnotify-test-%d", os.Getpid())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := listen(t, tc.socket)
			t.Setenv(sdnotify.SocketEnv, tc.socket)
			n := sdnotify.FromEnv()
			if err := n.Notify(sdnotify.Ready, sdnotify.Status("deployed\n2 targets")); err != nil {
				t.Fatal(err)
			}
			if s := receive(t, got); s != "READY=1\nSTATUS=deployed 2 targets" {
				t.Errorf("got %q", s)
			}
		})
	}
}

// TestWithoutSocket: a process systemd did not start has no Notifier, and
// notifying does nothing.
func TestWithoutSocket(t *testing.T) {
	t.Setenv(sdnotify.SocketEnv, "")
	n := sdnotify.FromEnv()
	if n != nil {
		t.Fatalf("got %+v", n)
	}
	if err := n.Notify(sdnotify.Ready); err != nil {
		t.Fatal(err)
	}
	n.Watchdog(context.Background(), time.Second, func() error { return nil }, nil) // returns at once
}

// TestNotifyUnreachable: a socket that is not there is an error to report.
func TestNotifyUnreachable(t *testing.T) {
	n := sdnotify.New(filepath.Join(t.TempDir(), "absent"))
	if err := n.Notify(sdnotify.Ready); err == nil {
		t.Fatal("no error")
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		err       bool
	}{
		{"", "", 0, false},
		{"2000000", "", 2 * time.Second, false},
		{"2000000", self, 2 * time.Second, false},
		{"2000000", "1", 0, true},
		{"0", "", 0, true},
		{"soon", "", 0, true},
	} {
		t.Setenv(sdnotify.WatchdogUSecEnv, tc.usec)
		t.Setenv(sdnotify.WatchdogPIDEnv, tc.pid)
		got, err := sdnotify.WatchdogInterval()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("usec %q pid %q: got %v, %v", tc.usec, tc.pid, got, err)
		}
	}
}

// TestWatchdogOnlyWhileHealthy: WATCHDOG=1 comes every half interval while
// healthy; while not, nothing but one STATUS= line saying why; then again.
func TestWatchdogOnlyWhileHealthy(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "notify")
	got := listen(t, socket)
	var sick atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sdnotify.New(socket).Watchdog(ctx, 20*time.Millisecond, func() error {
			if sick.Load() {
				return errors.New("not connected to NATS")
			}
			return nil
		}, func(err error) { t.Error(err) })
	}()
	for range 3 {
		if s := receive(t, got); s != sdnotify.WatchdogState {
			t.Fatalf("got %q", s)
		}
	}
	sick.Store(true)
	// Pets sent before the change may still be queued; then the status.
	for s := receive(t, got); s != "STATUS=unhealthy, not petting the watchdog: not connected to NATS"; s = receive(t, got) {
		if s != sdnotify.WatchdogState {
			t.Fatalf("got %q", s)
		}
	}
	// While sick, nothing else comes, however many ticks pass.
	select {
	case s := <-got:
		t.Fatalf("got %q while unhealthy", s)
	case <-time.After(200 * time.Millisecond):
	}
	sick.Store(false)
	if s := receive(t, got); s != sdnotify.WatchdogState {
		t.Fatalf("got %q", s)
	}
	cancel()
	<-done
}
