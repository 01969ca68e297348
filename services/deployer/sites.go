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
	if _, ok := d.instances.of(target); !ok {
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
	if err := d.orderLastAccepted(ctx, target, vs); err != nil {
		d.env.Log.ErrorContext(ctx, "order of the last accepted bundle failed; its verdict, a trigger or a restart orders it", "target", target, "version", vs.LastGoodVersion, "err", err)
	}
}
