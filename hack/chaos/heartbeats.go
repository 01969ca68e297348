package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// checkHeartbeats checks, once the run is over, that the leases bucket
// holds a live heartbeat of every kind (those the configuration validates
// with, and any other one a replica serves) for every validator process
// running: heartbeats renewed through the
// kills of NATS nodes and replicas still name exactly the live replicas
// (a killed replica's expire by their TTL). Waits up to a minute for
// restarted processes and expiring keys; records what is missing or left.
func (r *run) checkHeartbeats() {
	js, done := r.jetStream()
	defer done()
	kinds := []string{"haproxy", "template"}
	host, _ := os.Hostname()
	deadline := time.Now().Add(time.Minute)
	for {
		err := r.heartbeatsMatch(js, host, kinds)
		if err == nil {
			r.res.Heartbeats = ""
			r.logf("heartbeats: every running validator announces every kind")
			return
		}
		r.res.Heartbeats = err.Error()
		if time.Now().After(deadline) {
			r.logf("heartbeats: %v", err)
			return
		}
		time.Sleep(time.Second)
	}
}

func (r *run) heartbeatsMatch(js jetstream.JetStream, host string, kinds []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		return err
	}
	lister, err := kv.ListKeysFiltered(ctx, msg.KindHeartbeatPrefix+">")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return err
	}
	have := map[string]bool{}
	if lister != nil {
		for k := range lister.Keys() {
			have[k] = true
		}
	}
	for k := range have {
		if kind, ok := msg.KindOfHeartbeatKey(k); ok && !slices.Contains(kinds, kind) {
			kinds = append(kinds, kind) // served by some replica: every one serves it
		}
	}
	var want []string
	for _, p := range r.procs {
		if strings.HasPrefix(p.name, "validator-") && p.pid() != 0 {
			for _, kind := range kinds {
				want = append(want, msg.KindHeartbeatKey(kind, host+"-"+strconv.Itoa(p.pid())))
			}
		}
	}
	var missing []string
	for _, k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
		delete(have, k)
	}
	var left []string
	for k := range have {
		left = append(left, k)
	}
	slices.Sort(left)
	if len(missing)+len(left) > 0 {
		return fmt.Errorf("heartbeats missing %v, of no running validator %v", missing, left)
	}
	return nil
}
