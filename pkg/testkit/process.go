package testkit

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a program a test runs as a process of its own. Its output
// (stdout and stderr) is kept, and shown in the test log if the test
// fails. It is killed when the test ends, if it still runs.
type Process struct {
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// StartProcess starts bin with args.
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(bin, args...), out: &SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		// A program built by GoBuild under `go test -race` has the race
		// detector, which reports on the program's output and goes on.
		if strings.Contains(p.out.String(), RaceReport) {
			t.Errorf("%s (pid %d) reported a data race", filepath.Base(bin), p.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", filepath.Base(bin), p.cmd.Process.Pid, p.out)
		}
	})
	return p
}

// RaceReport opens every report of the race detector.
const RaceReport = "WARNING: DATA RACE"

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL, which the program cannot catch or clean up after,
// and waits for the process to be gone.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill pid %d: %v", p.Pid(), err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d still runs 10s after SIGKILL", p.Pid())
	}
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Output returns what the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// SyncBuffer is a bytes.Buffer that a process (or any writer) can write
// while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartCommand starts cmd, whose outputs the caller has set, and returns
// stop: SIGTERM, then SIGKILL if the program has not ended grace later,
// then wait for it; stop is idempotent and runs when the test ends. exited
// is closed once the program has ended (by itself or by stop), and err
// then tells how.
func StartCommand(t testing.TB, cmd *exec.Cmd, grace time.Duration) (stop func(), exited <-chan struct{}, err func() error) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(cmd.Path), err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(grace):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	return stop, done, func() error { <-done; return waitErr }
}

// LiveProcess is a process running on the machine: its pid and its
// command line, the arguments joined by spaces.
type LiveProcess struct {
	Pid     int
	Cmdline string
}

// String is "pid: command line".
func (p LiveProcess) String() string { return strconv.Itoa(p.Pid) + ": " + p.Cmdline }

// ProcessesNaming lists the live processes whose command line contains s
// (read from /proc; one that ends while it reads is left out).
func ProcessesNaming(tb testing.TB, s string) []LiveProcess {
	tb.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		tb.Fatal(err)
	}
	var out []LiveProcess
	for _, p := range cmdlines {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		line := strings.TrimSpace(string(bytes.ReplaceAll(data, []byte{0}, []byte{' '})))
		if !strings.Contains(line, s) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out = append(out, LiveProcess{Pid: pid, Cmdline: line})
		}
	}
	return out
}
