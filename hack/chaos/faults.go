package chaos

import (
	"context"
	"sync"
	"time"
)

// editWithFaults makes the edits, evenly spread over Duration, while the
// mode's faults run. It returns when the edits are done and every fault has
// been repaired (killed nodes restarted, killed replicas restarting), with
// the time of the last edit.
func (r *run) editWithFaults() time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if r.o.Mode == Faults || r.o.Mode == LoseNode {
		wg.Add(1)
		go func() { defer wg.Done(); r.killServices(ctx) }()
	}
	switch r.o.Mode {
	case Faults:
		wg.Add(1)
		go func() { defer wg.Done(); r.killNodes(ctx) }()
	case LoseNode:
		wg.Add(1)
		go func() { defer wg.Done(); r.loseNode(ctx) }()
	}
	every := r.o.Duration / time.Duration(max(r.o.Edits, 1))
	next := time.Now()
	var last time.Time
	for range r.o.Edits {
		time.Sleep(time.Until(next))
		next = next.Add(every)
		what, err := r.mf.edit()
		if err != nil {
			r.t.Fatalf("edit: %v", err)
		}
		last = time.Now()
		r.res.EditsDone++
		if r.res.EditsDone%100 == 0 {
			r.logf("edit %d: %s", r.res.EditsDone, what)
		}
	}
	cancel()
	wg.Wait()
	r.res.Objects = r.mf.objects()
	return last
}

// jitter is d +-50%.
func (r *run) jitter(d time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return d/2 + time.Duration(r.rng.Int64N(int64(d)+1))
}

func (r *run) pick(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// killServices SIGKILLs a random service replica every ServiceKillEvery
// (+-50%); its supervisor restarts it 1-3s later.
func (r *run) killServices(ctx context.Context) {
	for sleep(ctx, r.jitter(r.o.ServiceKillEvery)) {
		p := r.procs[r.pick(len(r.procs))]
		pause := time.Second + time.Duration(r.pick(2000))*time.Millisecond
		if p.kill(pause) {
			r.res.ServiceKills++
			r.logf("killed %s (restart in %v)", p.name, pause)
		}
	}
}

// killNodes SIGKILLs a random NATS node every NodeKillEvery (+-50%) and
// restarts it 2-5s later; one node at most is down at a time, so the
// cluster keeps its quorum.
func (r *run) killNodes(ctx context.Context) {
	for sleep(ctx, r.jitter(r.o.NodeKillEvery)) {
		i := r.pick(r.nats.Size())
		name := r.nats.Name(i)
		if err := r.nats.Kill(i); err != nil {
			r.t.Errorf("kill %s: %v", name, err)
			return
		}
		r.res.NodeKills++
		pause := 2*time.Second + time.Duration(r.pick(3000))*time.Millisecond
		r.logf("killed nats-server %s (restart in %v)", name, pause)
		time.Sleep(pause)
		if err := r.nats.Restart(i); err != nil {
			r.t.Errorf("restart %s: %v", name, err)
			return
		}
		r.logf("nats-server %s healthy again", name)
	}
}

// loseNode loses a random NATS node with its store a quarter into the
// edits, and replaces it ReplaceAfter later when that is set.
func (r *run) loseNode(ctx context.Context) {
	if !sleep(ctx, r.o.Duration/4) {
		return
	}
	i := r.pick(r.nats.Size())
	name := r.nats.Name(i)
	if err := r.nats.Lose(i); err != nil {
		r.t.Errorf("lose %s: %v", name, err)
		return
	}
	r.res.NodeLosses++
	r.logf("lost nats-server %s and its store", name)
	if r.o.ReplaceAfter <= 0 {
		return
	}
	// The replacement is an operator's repair: it completes even when the
	// edits end first.
	time.Sleep(r.o.ReplaceAfter)
	fresh, err := r.nats.Replace(i)
	if err != nil {
		r.t.Errorf("replace %s: %v", name, err)
		return
	}
	r.logf("removed peer %s; nats-server %s healthy in its place", name, fresh)
}
