package deployer

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// acceptedKeys are the validation statuses a site's deployer follows.
const acceptedKeys = "validate.*"

// followAccepted orders, at a site, the last accepted bundle of a target
// of the site each time its validation status (sourced from the hub)
// changes, as a verdict would. Verdicts and statuses reach a site by
// separate sources: a verdict that came before its status, and waited for
// it longer than msg.ConfirmWait (a link back after a long cut, a backlog),
// is dead-lettered, and the status still gets the bundle deployed. Orders
// carry the verdict path's message id, so a bundle ordered both ways is
// ordered once. w watches from before the start's catch-up read the
// statuses; a watch that ends is started again.
func (d *deployer) followAccepted(ctx context.Context, w jetstream.KeyWatcher) error {
	return d.followKeys(ctx, w, acceptedKeys, func(e jetstream.KeyValueEntry) {
		if e.Operation() == jetstream.KeyValuePut {
			d.onAccepted(ctx, e)
		}
	}, jetstream.UpdatesOnly())
}

func (d *deployer) onAccepted(ctx context.Context, e jetstream.KeyValueEntry) {
	target := strings.TrimPrefix(e.Key(), "validate.")
	ins, ok := d.instances.of(target)
	if !ok {
		return
	}
	var vs msg.ValidationStatus
	if err := msg.Decode(e.Value(), &vs); err != nil {
		d.env.Log.ErrorContext(ctx, "unreadable validation status", "target", target, "err", err)
		return
	}
	if vs.LastGood == "" {
		return
	}
	switch pin, err := d.readPin(ctx, target); {
	case err != nil:
		d.env.Log.ErrorContext(ctx, "pin unreadable; the last accepted bundle is not ordered now, a trigger or a restart orders what should run", "target", target, "err", err)
		return
	case pin != nil:
		d.env.Log.InfoContext(ctx, "target pinned; the last accepted bundle is not deployed", "target", target, "version", vs.LastGoodVersion, "pinned", pin.Version)
		return
	}
	if err := d.order(ctx, ins, vs.LastGoodVersion, vs.LastGood, msg.OrderValidated, lastAcceptedID(vs)); err != nil {
		d.env.Log.ErrorContext(ctx, "order of the last accepted bundle failed; its verdict, a trigger or a restart orders it", "target", target, "version", vs.LastGoodVersion, "err", err)
	}
}
