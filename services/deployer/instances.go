package deployer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
)

// instance is one program a target is delivered to.
type instance struct {
	target, name, driver string
	apply                Applier
	// relocate is the folder the instance sees its files in, when it is
	// not the target's base: bundles are relocated there before applying.
	relocate string
	// streak is the instance's current run of failed deploys.
	streak failureStreak
	// view is HAProxy's own view of the instance, when its driver has
	// one (deploy.canary judges by it).
	view statsView
}

// newInstances builds the instances of a target: the one default instance,
// or one per entry of deploy.instances (relocated to its own folder).
func newInstances(target string, t config.Target) ([]*instance, error) {
	var out []*instance
	if t.Deploy.Pods != nil {
		return nil, nil // its instances come and go with the Pods
	}
	for _, d := range t.Deploy.PerInstance() {
		a, err := newApplier(target, t.MainFile(), d)
		if err != nil {
			return nil, err
		}
		in := &instance{target: target, name: d.Instance, driver: d.Driver, apply: a}
		if v, ok := a.(statsView); ok && d.AdminSocket != "" {
			in.view = v
		}
		if len(t.Deploy.Instances) > 0 {
			if dir := cmp.Or(d.HAProxyDir, d.Dest); dir != t.Base {
				in.relocate = dir
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// instanceSet holds the instances of every target; those made from Pods
// come and go while the deployer runs.
type instanceSet struct {
	mu sync.Mutex
	by map[string][]*instance // by target; a known target may have none
}

func (s *instanceSet) set(target string, ins []*instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.by[target] = ins
}

// of returns a copy of target's instances, and whether target is known.
func (s *instanceSet) of(target string) ([]*instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ins, ok := s.by[target]
	return slices.Clone(ins), ok
}

func (s *instanceSet) all() map[string][]*instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]*instance, len(s.by))
	for t, ins := range s.by {
		out[t] = slices.Clone(ins)
	}
	return out
}

func (s *instanceSet) get(target, name string) *instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range s.by[target] {
		if in.name == name {
			return in
		}
	}
	return nil
}

func (s *instanceSet) add(in *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.by[in.target] = append(s.by[in.target], in)
}

func (s *instanceSet) remove(target, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.by[target] = slices.DeleteFunc(s.by[target], func(in *instance) bool { return in.name == name })
}

// InstanceConsumer is the durable consumer of one instance's orders.
func InstanceConsumer(target, instance string) string { return "deployer-" + target + "-" + instance }

// deployAckWait bounds how long an order handled by a deployer that died
// waits before another replica (or the restarted one) gets it; a live
// handler keeps its order with InProgress.
const deployAckWait = 2 * time.Second

// consume carries out one instance's orders, one at a time across every
// deployer replica (MaxAckPending 1), until ctx is done. Instances consume
// in parallel.
func (d *deployer) consume(ctx context.Context, in *instance, o bus.Options) error {
	cons, renew, err := d.openConsumer(ctx, in, jetstream.DeliverAllPolicy)
	if err != nil {
		return err
	}
	o.AckWait, o.Renew = deployAckWait, renew
	return bus.Consume(ctx, cons, d.onOrder, o)
}

// openConsumer creates (or finds) the durable consumer of in's orders; a
// new one starts at deliver. The renewal gets it back if it is lost.
func (d *deployer) openConsumer(ctx context.Context, in *instance, deliver jetstream.DeliverPolicy) (jetstream.Consumer, bus.Renewal, error) {
	cons, renew, err := bus.Durable(ctx, d.env.JS, msg.StreamDeploys, jetstream.ConsumerConfig{
		Durable: InstanceConsumer(in.target, in.name), Description: "deploy orders of " + in.target + "/" + in.name,
		FilterSubject: msg.DeploySubject(in.target, in.name), AckPolicy: jetstream.AckExplicitPolicy,
		// No MaxDeliver: an order is never dropped (onOrder retries one
		// that fails; a stopped deployer's comes back).
		AckWait: deployAckWait, MaxDeliver: -1, MaxAckPending: 1, DeliverPolicy: deliver,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("deployer: consumer of %s/%s: %w", in.target, in.name, err)
	}
	return cons, renew, nil
}

// catchUpOrder is an order a starting deployer gives, with its message id.
type catchUpOrder struct {
	id    string
	order msg.DeployOrder
}

// catchUpOrders are the orders of the bundle every instance should hold
// (the pinned one, or the last accepted one: desired), given through the
// same apply path as any order: an instance behind it (added to the
// configuration, an order lost with a deployer that died before publishing
// it) is brought up to date, and one whose files or program changed while
// no deployer ran (its folder removed, HAProxy restarted on other files) is
// repaired; the drivers change nothing where nothing differs. The order of
// an instance behind has the id an accepted verdict gives, so an order
// already given is not given twice; the others have one per carried-out
// order (DeployStatus.Order), so replicas starting together give one. They
// are read first thing at start, before this replica's consumers exist,
// so that replicas starting together read the statuses before any of them
// carries an order out (catchUp gives them once the consumers run).
func (d *deployer) catchUpOrders(ctx context.Context) ([]catchUpOrder, error) {
	var out []catchUpOrder
	for target, ins := range d.instances.all() {
		for _, in := range ins {
			version, hash, pin, err := d.desiredFor(ctx, target, in.name)
			if msg.IsPermanent(err) {
				continue // nothing accepted yet, or no canary started
			}
			if err != nil {
				return nil, err
			}
			st, _, err := d.readStatus(ctx, in)
			if err != nil {
				return nil, err
			}
			id := acceptedID(in, version)
			if st.Version < version && pin == nil {
				d.env.Log.InfoContext(ctx, "instance behind the last accepted bundle", "target", target, "instance", in.name, "has", st.Version, "accepted", version)
			} else {
				id = fmt.Sprintf("%s.%s.start-%d-%d", target, in.name, st.Order, version)
			}
			out = append(out, catchUpOrder{id: id, order: msg.DeployOrder{Target: target, Instance: in.name, Version: version, BundleHash: hash, Reason: msg.OrderCatchUp}})
		}
	}
	return out, nil
}

// catchUp gives the orders catchUpOrders read.
func (d *deployer) catchUp(ctx context.Context, orders []catchUpOrder) error {
	for _, c := range orders {
		if _, err := bus.Publish(ctx, d.env.JS, msg.DeploySubject(c.order.Target, c.order.Instance), c.id, c.order); err != nil {
			return err
		}
	}
	return nil
}

// checkDrift re-applies, every interval, the bundle each instance of
// target should have (the last accepted one), until ctx is done. Replicas
// publish the same order id per interval, so each instance gets one check
// per interval however many deployers run.
func (d *deployer) checkDrift(ctx context.Context, target string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			ins, _ := d.instances.of(target)
			for _, in := range ins {
				if err := d.orderDriftCheck(ctx, in, now.UnixNano()/int64(every)); err != nil && ctx.Err() == nil {
					d.env.Log.WarnContext(ctx, "drift check not ordered", "target", target, "instance", in.name, "err", err)
				}
			}
		}
	}
}

func (d *deployer) orderDriftCheck(ctx context.Context, in *instance, period int64) error {
	version, hash, _, err := d.desiredFor(ctx, in.target, in.name)
	if msg.IsPermanent(err) {
		return nil // nothing accepted yet (or no canary started): nothing to compare with
	}
	if err != nil {
		return err
	}
	o := msg.DeployOrder{Target: in.target, Instance: in.name, Version: version, BundleHash: hash, Reason: msg.OrderDriftCheck}
	id := fmt.Sprintf("%s.%s.drift-%d", in.target, in.name, period)
	_, err = bus.Publish(ctx, d.env.JS, msg.DeploySubject(in.target, in.name), id, o)
	return err
}

// dropLegacyConsumer removes the single consumer of every order that
// earlier versions used; its orders are now read per instance.
func (d *deployer) dropLegacyConsumer(ctx context.Context) {
	err := d.env.JS.DeleteConsumer(ctx, msg.StreamDeploys, "deployer")
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		d.env.Log.Warn("could not remove the old shared deploy consumer", "err", err)
	}
}
