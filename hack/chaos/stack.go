package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one service replica, supervised as an orchestrator would: when
// it exits it is started again, after the pause the fault injector asked
// for when it killed it, or after a second when it exited by itself (a
// crash). Its output goes to one log file across restarts.
type proc struct {
	name, bin, log string
	args           []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	pause   time.Duration // > 0: the harness killed it; restart after this
	starts  int
	kills   int
	crashes int
	exits   []string // how each crash ended
	stopped bool
}

// run starts the process and keeps it running until ctx ends, then kills it.
func (p *proc) run(ctx context.Context) {
	for {
		if err := p.start(); err != nil {
			p.mu.Lock()
			if p.stopped {
				p.mu.Unlock()
				return
			}
			p.crashes++
			p.exits = append(p.exits, err.Error())
			p.mu.Unlock()
		} else {
			select {
			case <-ctx.Done():
				p.stop()
				return
			case <-p.doneCh():
			}
		}
		p.mu.Lock()
		pause := p.pause
		p.pause = 0
		if pause == 0 {
			p.crashes++
			if p.cmd != nil && p.cmd.ProcessState != nil {
				p.exits = append(p.exits, p.cmd.ProcessState.String())
			}
			pause = time.Second
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

func (p *proc) doneCh() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return fmt.Errorf("%s: stopped", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	p.starts++
	fmt.Fprintf(f, "# chaos: start %d of %s at %s\n", p.starts, p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, which the harness kills; and killed with the
	// harness if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

// pid is the process id of the replica's current process (0: none).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill sends SIGKILL to the replica's process group; the supervisor starts
// it again after pause. It reports false when the replica was not running.
func (p *proc) kill(pause time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.pause > 0 {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
	}
	p.pause = pause
	p.kills++
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	return true
}

// stop kills the replica's process group for good and waits for it.
func (p *proc) stop() {
	p.mu.Lock()
	p.stopped = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// procStats is what a replica went through.
type procStats struct {
	Name           string
	Kills, Crashes int
	Exits          []string
}

func (p *proc) stats() procStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return procStats{Name: p.name, Kills: p.kills, Crashes: p.crashes, Exits: append([]string(nil), p.exits...)}
}
