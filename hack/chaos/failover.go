package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// failover measures, FailoverRounds times, how long the target goes
// without a deploy when the renderer replica holding its render lease is
// killed: the holder is read from the leases bucket and SIGKILLed (its
// restart waits until the round is over), one manifest is edited at once,
// and the time from the kill until out/ holds what `weft render` makes of
// the manifests is recorded. It covers the lease passing to the other
// replica and the render, validation and deploy of the edit.
func (r *run) failover() {
	js, done := r.jetStream()
	defer done()
	if r.o.FailoverOf == "deployer" {
		r.deployFailover(js)
		return
	}
	for i := range r.o.FailoverRounds {
		p, err := r.leaseHolder(js)
		if err != nil {
			r.logf("failover %d: %v", i+1, err)
			r.res.FailoverMissed++
			continue
		}
		const pause = 15 * time.Second
		if !p.kill(pause) {
			r.logf("failover %d: %s was not running", i+1, p.name)
			r.res.FailoverMissed++
			continue
		}
		killed := time.Now()
		what, err := r.mf.edit()
		if err != nil {
			r.t.Fatalf("edit: %v", err)
		}
		ok, took, diff := r.converge(fmt.Sprintf("failover-%d", i+1), killed)
		r.logf("failover %d: killed %s, edited %s: deployed=%v after %v %s", i+1, p.name, what, ok, took.Round(time.Millisecond), diff)
		if !ok {
			r.res.FailoverMissed++
		} else {
			r.res.Failover = append(r.res.Failover, took)
		}
		// Both replicas run again before the next round.
		time.Sleep(time.Until(killed.Add(pause + 3*time.Second)))
	}
}

// leaseHolder is the renderer process holding the quickstart target's
// render lease: the lease names its replica, <host>-<pid>.
func (r *run) leaseHolder(js jetstream.JetStream) (*proc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, msg.RenderLeaseKey("quickstart"))
	if err != nil {
		return nil, fmt.Errorf("render lease: %w", err)
	}
	return r.replicaProc("renderer-", string(e.Value()))
}

// replicaProc is the process of the service whose names start with prefix
// whose replica id (<host>-<pid>) is holder.
func (r *run) replicaProc(prefix, holder string) (*proc, error) {
	i := strings.LastIndexByte(holder, '-')
	pid, err := strconv.Atoi(holder[i+1:])
	if i < 0 || err != nil {
		return nil, fmt.Errorf("lease held by %q, not <host>-<pid>", holder)
	}
	for _, p := range r.procs {
		if strings.HasPrefix(p.name, prefix) && p.pid() == pid {
			return p, nil
		}
	}
	return nil, fmt.Errorf("lease held by %q, which is no running %s", holder, strings.TrimSuffix(prefix, "-"))
}

// deployFailover measures, FailoverRounds times, how long an order waits
// when the deployer carrying it out dies: a manifest is edited, and the
// deployer replica that takes the instance's deploy lease for the order
// is SIGKILLed during its check_cmd (a second long), before any file is
// written. Recorded: the time from the kill until another replica holds
// the lease (the takeover), and until out/ holds what `weft render` makes
// of the manifests.
func (r *run) deployFailover(js jetstream.JetStream) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		r.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, msg.DeployLeaseKey("quickstart", ">"), jetstream.UpdatesOnly())
	if err != nil {
		r.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for i := range r.o.FailoverRounds {
		drain(w)
		what := r.editDeployed()
		p, holder, err := r.nextHolder(w, "", 30*time.Second)
		if err != nil {
			ok, took, diff := r.converge(fmt.Sprintf("deploy-failover-%d", i+1), time.Now())
			r.logf("deploy failover %d: edited %s: %v; deployed=%v %v %s", i+1, what, err, ok, took.Round(time.Millisecond), diff)
			r.res.FailoverMissed++
			continue
		}
		const pause = 15 * time.Second
		if !p.kill(pause) {
			r.logf("deploy failover %d: %s was not running", i+1, p.name)
			r.res.FailoverMissed++
			continue
		}
		killed := time.Now()
		if _, _, err := r.nextHolder(w, holder, r.o.Settle); err != nil {
			r.logf("deploy failover %d: no other replica took the order: %v", i+1, err)
		} else {
			r.res.Takeover = append(r.res.Takeover, time.Since(killed))
		}
		ok, took, diff := r.converge(fmt.Sprintf("deploy-failover-%d", i+1), killed)
		r.logf("deploy failover %d: edited %s, killed %s during its order: deployed=%v after %v %s", i+1, what, p.name, ok, took.Round(time.Millisecond), diff)
		if !ok {
			r.res.FailoverMissed++
		} else {
			r.res.Failover = append(r.res.Failover, took)
		}
		time.Sleep(time.Until(killed.Add(pause + 3*time.Second)))
	}
}

// nextHolder waits for a deploy lease written by a replica other than
// not, and returns its process (nil when the holder is not a deployer
// process of this run, e.g. after a takeover by a replica that was
// restarted) and replica id.
func (r *run) nextHolder(w jetstream.KeyWatcher, not string, within time.Duration) (*proc, string, error) {
	timeout := time.After(within)
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, "", errors.New("lease watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut || string(e.Value()) == not {
				continue
			}
			holder := string(e.Value())
			if not != "" {
				return nil, holder, nil
			}
			p, err := r.replicaProc("deployer-", holder)
			return p, holder, err
		case <-timeout:
			return nil, "", fmt.Errorf("no deploy lease taken within %v", within)
		}
	}
}

// drain drops the lease writes seen so far (renewals and releases of
// earlier orders).
func drain(w jetstream.KeyWatcher) {
	for {
		select {
		case <-w.Updates():
		default:
			return
		}
	}
}

// jetStream connects the harness itself to the cluster; done closes it.
func (r *run) jetStream() (jetstream.JetStream, func()) {
	nc, err := nats.Connect(r.nats.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		r.t.Fatal(err)
	}
	return js, nc.Close
}
