package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// HAProxyMW is an HAProxy in master-worker mode ("-W -db -S <master>"),
// started in a process group of its own. It is stopped when the test ends:
// SIGTERM to the master, then SIGKILL to the group, so that no worker a
// reload left behind survives the test.
type HAProxyMW struct {
	// Master is the master CLI's unix socket.
	Master string
	cmd    *exec.Cmd
	out    *SyncBuffer
	done   chan struct{}
}

// MWProc is the master's "show proc": its reload counter, the current
// workers and the workers of earlier generations still finishing.
type MWProc struct {
	Reloads      int
	Workers, Old []int
}

// StartHAProxyMW runs HAProxy on the configuration file cfg with its master
// CLI on the socket master, and waits until one worker runs.
func StartHAProxyMW(tb testing.TB, cfg, master string) *HAProxyMW {
	tb.Helper()
	h := &HAProxyMW{Master: master, out: &SyncBuffer{}, done: make(chan struct{})}
	h.cmd = exec.Command(HAProxy(tb), "-W", "-db", "-f", cfg, "-S", master)
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.cmd.Start(); err != nil {
		tb.Fatalf("start haproxy: %v", err)
	}
	go func() {
		_ = h.cmd.Wait()
		close(h.done)
	}()
	tb.Cleanup(func() {
		pid := h.cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			tb.Errorf("kill haproxy process group %d: %v", pid, err)
		}
		<-h.done
		if tb.Failed() {
			tb.Logf("haproxy output:\n%s", h.out)
		}
	})
	Eventually(tb, 30*time.Second, func() error {
		select {
		case <-h.done:
			return fmt.Errorf("haproxy exited at start:\n%s", h.out)
		default:
		}
		p, err := h.Proc(tb.Context())
		if err != nil {
			return err
		}
		if len(p.Workers) != 1 {
			return fmt.Errorf("workers %v, want one", p.Workers)
		}
		return nil
	})
	return h
}

// Pid is the master's process id.
func (h *HAProxyMW) Pid() int { return h.cmd.Process.Pid }

// Output is what HAProxy wrote so far.
func (h *HAProxyMW) Output() string { return h.out.String() }

// Do sends one command to the master CLI and returns the answer.
func (h *HAProxyMW) Do(ctx context.Context, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", h.Master)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	// The master CLI answers once the write side is closed.
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Proc reads "show proc".
func (h *HAProxyMW) Proc(ctx context.Context) (MWProc, error) {
	out, err := h.Do(ctx, "show proc")
	if err != nil {
		return MWProc{}, err
	}
	var p MWProc
	section, master := "", false
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "#" && len(f) > 1:
			section = strings.Join(f[1:], " ")
		case strings.HasPrefix(f[0], "#"):
		case len(f) >= 3 && f[1] == "master":
			master = true
			p.Reloads, err = strconv.Atoi(f[2])
			if err != nil {
				return MWProc{}, fmt.Errorf("show proc: reload counter in %q", line)
			}
		case len(f) >= 2 && f[1] == "worker":
			pid, err := strconv.Atoi(f[0])
			if err != nil {
				return MWProc{}, fmt.Errorf("show proc: pid in %q", line)
			}
			if section == "old workers" {
				p.Old = append(p.Old, pid)
			} else {
				p.Workers = append(p.Workers, pid)
			}
		}
	}
	if !master {
		return MWProc{}, fmt.Errorf("show proc: no master in %q", out)
	}
	return p, nil
}
