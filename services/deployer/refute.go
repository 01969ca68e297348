package deployer

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
)

// onRefuted handles a verdict that withdraws a provisional acceptance
// (msg.Validated.Refutes): the validator moved the validation status's
// LastGood back to the last fully accepted bundle before publishing it, so
// every instance is ordered the bundle it should now hold (desiredFor: the
// pin, a canary's, or LastGood), as a pin orders its bundle. A refutation
// the status does not confirm (it still names the refuted bundle as the
// last good one) orders nothing.
func (d *deployer) onRefuted(ctx context.Context, m jetstream.Msg, v msg.Validated) error {
	vs, err := d.validation(ctx, v.Target)
	if err != nil {
		return err
	}
	if vs.LastGood == v.BundleHash {
		return msg.Unconfirmed(msg.AgeOf(m.Metadata()), "refutation %s v%d: the validation status still names its bundle as the last good one", v.Target, v.Version)
	}
	d.env.Log.ErrorContext(ctx, "a deployed bundle was refused by the whole check after a provisional acceptance; rolling back", "target", v.Target, "version", v.Version, "reason", v.Reason, "to_version", vs.LastGoodVersion)
	ins, _ := d.instances.of(v.Target)
	for _, in := range ins {
		version, hash, _, err := d.desiredFor(ctx, v.Target, in.name)
		if msg.IsPermanent(err) {
			continue // nothing accepted, nothing pinned, no canary started
		}
		if err != nil {
			return err
		}
		o := msg.DeployOrder{Target: v.Target, Instance: in.name, Version: version, BundleHash: hash, Reason: msg.OrderRefuted}
		id := fmt.Sprintf("%s.%s.refuted-%d", v.Target, in.name, v.Version)
		if _, err := bus.Publish(ctx, d.env.JS, msg.DeploySubject(v.Target, in.name), id, o); err != nil {
			return err
		}
	}
	return nil
}
