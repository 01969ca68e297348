package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/weftio/weft/services/validator/haproxycheck"
)

var (
	// ErrHAProxyExited: HAProxy exited when it should have been serving.
	ErrHAProxyExited = errors.New("demo: haproxy exited")
	// ErrAddrInUse: the address HAProxy is to bind is taken.
	ErrAddrInUse = errors.New("demo: address in use")
)

// HAProxyOptions say how to start HAProxy.
type HAProxyOptions struct {
	// Bin is the haproxy binary.
	Bin string
	// Dir is where the bootstrap configuration is written, as haproxy.cfg
	// (created if missing).
	Dir string
	// Listen is the address the bootstrap configuration binds.
	Listen string
	// MasterSocket and AdminSocket are the master CLI and the admin stats
	// socket (level admin, expose-fd listeners).
	MasterSocket, AdminSocket string
	// Log receives HAProxy's output, one record per line.
	Log *slog.Logger
}

// startTimeout bounds the wait for HAProxy's master socket; stopTimeout the
// wait for HAProxy to exit once asked to.
const (
	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
)

// HAProxy is a running HAProxy in master-worker mode. It is stopped (the
// master and its workers) when the context given to StartHAProxy is done.
type HAProxy struct {
	MasterSocket, AdminSocket string
	// Pid is the master's process id.
	Pid int

	ctx  context.Context
	out  *lineLog
	done chan struct{}
	err  error // of the process, once done is closed
}

// StartHAProxy writes the bootstrap configuration and starts HAProxy on
// it, returning once its master socket answers.
func StartHAProxy(ctx context.Context, o HAProxyOptions) (*HAProxy, error) {
	if err := checkFree(o.Listen); err != nil {
		return nil, err
	}
	cfg, err := writeBootstrap(o)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, o.Bin, "-W", "-db", "-f", cfg, "-S", o.MasterSocket)
	h := &HAProxy{MasterSocket: o.MasterSocket, AdminSocket: o.AdminSocket, ctx: ctx, out: newLineLog(o.Log.With("process", "haproxy"), ctx), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = h.out, h.out
	// glibc's malloc on huge pages: HAProxy parses the whole configuration
	// at each reload, as haproxy -c does (haproxycheck.HugePages)
	cmd.Env = haproxycheck.Environ(os.Environ())
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return stopGroup(cmd.Process) }
	cmd.WaitDelay = stopTimeout
	if err := start(cmd); err != nil {
		return nil, fmt.Errorf("demo: start haproxy: %w", err)
	}
	h.Pid = cmd.Process.Pid
	go func() {
		h.err = cmd.Wait()
		killGroup(cmd.Process) // workers that outlived their master
		close(h.done)
	}()
	if err := h.waitReady(); err != nil {
		killGroup(cmd.Process)
		<-h.done
		return nil, err
	}
	return h, nil
}

// Wait waits for HAProxy to exit. It returns nil when it was stopped by
// the context, and an error wrapping ErrHAProxyExited otherwise.
func (h *HAProxy) Wait() error {
	<-h.done
	if h.ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%w: %v; last output: %s", ErrHAProxyExited, h.err, h.out.last())
}

// waitReady polls the master socket until it accepts a connection.
func (h *HAProxy) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-h.done:
			if err := h.ctx.Err(); err != nil { // stopped as asked, while starting
				return fmt.Errorf("demo: haproxy stopped before serving: %w", err)
			}
			return fmt.Errorf("%w before serving: %v; last output: %s", ErrHAProxyExited, h.err, h.out.last())
		default:
		}
		if c, err := net.Dial("unix", h.MasterSocket); err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: haproxy's master socket %s did not answer within %s; last output: %s", h.MasterSocket, startTimeout, h.out.last())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkFree fails with ErrAddrInUse when addr cannot be bound.
func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %s is taken (another weft or HAProxy running?): %w", ErrAddrInUse, addr, err)
	}
	return l.Close()
}

// bootstrap is what HAProxy serves until weft delivers the target.
const bootstrap = `# Written by weft up --demo: served until weft delivers the rendered configuration.
global
  stats socket %s mode 600 level admin expose-fd listeners

defaults
  mode http
  timeout connect 1s
  timeout client 5s
  timeout server 5s

frontend http
  bind %s
  http-request return status 503 content-type text/plain string "waiting for weft's first configuration"
`

func writeBootstrap(o HAProxyOptions) (string, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	p := filepath.Join(o.Dir, "haproxy.cfg")
	if err := os.WriteFile(p, fmt.Appendf(nil, bootstrap, o.AdminSocket, o.Listen), 0o644); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	return p, nil
}
