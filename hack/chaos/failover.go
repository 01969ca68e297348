package chaos

import (
	"context"
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
	nc, err := nats.Connect(r.nats.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
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
	holder := string(e.Value())
	i := strings.LastIndexByte(holder, '-')
	pid, err := strconv.Atoi(holder[i+1:])
	if i < 0 || err != nil {
		return nil, fmt.Errorf("render lease held by %q, not <host>-<pid>", holder)
	}
	for _, p := range r.procs {
		if strings.HasPrefix(p.name, "renderer-") && p.pid() == pid {
			return p, nil
		}
	}
	return nil, fmt.Errorf("render lease held by %q, which is no running renderer", holder)
}
