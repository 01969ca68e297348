package deployer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
)

// A pin (msg.PinKey in the status bucket, written by a rollback) holds a
// target on one bundle: every way a deployer orders a bundle (catch-up,
// triggers, drift checks, new Pods, a site's followed statuses) orders the
// pinned one instead of the last accepted one, accepted verdicts order
// nothing, and an order for any other bundle is skipped when it is carried
// out. Every deployer watches the pins of its targets: a pin set orders
// its bundle to every instance, a pin lifted orders the last accepted one,
// with message ids from the pin's revision so that replicas order once.

// pinKeys are the status keys of pins.
const pinKeys = "pin.*"

// readPin returns target's pin, or nil when it is not pinned.
func (d *deployer) readPin(ctx context.Context, target string) (*msg.Pin, error) {
	var p msg.Pin
	rev, err := msg.LoadStatus(ctx, d.status, msg.PinKey(target), &p)
	if err != nil {
		return nil, msg.Retry(err, time.Second)
	}
	if rev == 0 {
		return nil, nil
	}
	return &p, nil
}

// desired is the bundle every instance of target should hold: the pinned
// one, or else the last accepted one (a target with neither is a
// permanent error).
func (d *deployer) desired(ctx context.Context, target string) (uint64, string, *msg.Pin, error) {
	p, err := d.readPin(ctx, target)
	if err != nil {
		return 0, "", nil, err
	}
	if p != nil {
		return p.Version, p.BundleHash, p, nil
	}
	version, hash, err := d.lastAccepted(ctx, target)
	return version, hash, nil, err
}

// confirmHeld is confirmOrder under a pin or a canary (held): an order
// for the held bundle is carried out whatever the instance has; any other
// that the recorded state confirms is skipped (what holds the instance
// supersedes it).
func confirmHeld(o msg.DeployOrder, vs msg.ValidationStatus, st msg.DeployStatus, held *heldBundle) (bool, error) {
	if held == nil {
		return confirmOrder(o, vs, st)
	}
	if held.names(o) {
		return true, nil
	}
	if _, err := confirmOrder(o, vs, st); err != nil {
		return false, err
	}
	return false, nil
}

// followPins orders, for a pin of one of this deployer's targets that is
// set or lifted, the bundle its instances should now hold. w watches from
// before the start's catch-up read the pins.
func (d *deployer) followPins(ctx context.Context, w jetstream.KeyWatcher) error {
	return d.followKeys(ctx, w, pinKeys, func(e jetstream.KeyValueEntry) { d.onPin(ctx, e) }, jetstream.UpdatesOnly())
}

func (d *deployer) onPin(ctx context.Context, e jetstream.KeyValueEntry) {
	target := strings.TrimPrefix(e.Key(), "pin.")
	ins, ok := d.instances.of(target)
	if !ok || len(ins) == 0 {
		return
	}
	for _, in := range ins {
		version, hash, pin, err := d.desiredFor(ctx, target, in.name)
		if msg.IsPermanent(err) {
			continue // nothing accepted, nothing pinned, no canary started
		}
		if err != nil {
			d.env.Log.ErrorContext(ctx, "pin changed, but the bundle to deploy could not be read; a trigger, a drift check or a restart orders it", "target", target, "instance", in.name, "err", err)
			continue
		}
		reason, what := msg.OrderUnpin, "unpin"
		if pin != nil {
			reason, what = msg.OrderRollback, "pin"
		}
		o := msg.DeployOrder{Target: target, Instance: in.name, Version: version, BundleHash: hash, Reason: reason}
		id := fmt.Sprintf("%s.%s.%s-%d", target, in.name, what, e.Revision())
		if _, err := bus.Publish(ctx, d.env.JS, msg.DeploySubject(target, in.name), id, o); err != nil {
			d.env.Log.ErrorContext(ctx, "order after a pin change failed; a trigger, a drift check or a restart orders it", "target", target, "instance", in.name, "err", err)
		}
	}
	d.env.Log.InfoContext(ctx, "pin changed; ordered", "target", target)
}

// followKeys hands every put, delete or purge of the status keys pattern
// to fn, from watch w on; a watch that ends is started again with opts.
func (d *deployer) followKeys(ctx context.Context, w jetstream.KeyWatcher, pattern string, fn func(jetstream.KeyValueEntry), opts ...jetstream.WatchOpt) error {
	for {
		for e := range w.Updates() {
			if e != nil {
				fn(e)
			}
		}
		_ = w.Stop()
		if ctx.Err() != nil {
			return nil
		}
		d.env.Log.WarnContext(ctx, "watch of the status bucket ended; watching again", "keys", pattern)
		for {
			var err error
			if w, err = d.status.Watch(ctx, pattern, opts...); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}
