package testkit

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Server is a program a test runs as a process of its own that it can kill
// (an outage, not a clean shutdown) and start again with the same
// arguments: the same ports and the same data folder. Its output is shown
// in the test log if the test fails. It is killed when the test ends.
type Server struct {
	t     testing.TB
	name  string
	args  []string
	ready func() error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *SyncBuffer
}

// NewServer returns a Server that runs args (the program first) and is
// ready when ready returns nil. It does not start it.
func NewServer(t testing.TB, name string, ready func() error, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, name: name, args: args, ready: ready}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, s.Output())
		}
	})
	return s
}

// Start starts the program and waits (up to a minute) until it is ready.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatalf("%s already runs", s.name)
	}
	cmd := exec.Command(s.args[0], s.args[1:]...)
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("start %s (%s): %v", s.name, filepath.Base(s.args[0]), err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.out = cmd, exited, out
	s.mu.Unlock()
	Eventually(s.t, time.Minute, func() error {
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting:\n%s", s.name, out)
		default:
		}
		if err := s.ready(); err != nil {
			return fmt.Errorf("%s not ready: %w", s.name, err)
		}
		return nil
	})
}

// Stop kills the program, if it runs, and waits for it to be gone.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Output returns what the program (its last run) wrote so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}
