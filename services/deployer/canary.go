package deployer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/lease"
	"github.com/weftio/weft/services/deployer/driver/runtime"
)

// Canaries (deploy.canary). A target's canary record (msg.CanaryKey in the
// status bucket) says which bundle went to the canary instances first, the
// bundle the others keep meanwhile (the previous one), HAProxy's view of
// each canary before the deploy and when the hold started, and the
// verdict. Everything that orders a bundle for an instance (catch-up,
// triggers, drift checks, pins lifted) orders what the record says that
// instance should run (msg.Canary.For), and an order for any other bundle
// is skipped when it is carried out, so the rest never get a bundle whose
// canary has not passed.
//
// One replica at a time (msg.CanaryLeaseKey) judges a target's canary,
// one step per canaryTick, from the record alone: it starts a canary when
// the validation status names a bundle newer than the record's (reading
// HAProxy's view of the canaries before ordering them the bundle), starts
// the hold once every canary runs it, and at the end of the hold compares
// HAProxy's view with the one before: the bundle passes (the rest are
// ordered it) or is refused (the canaries are ordered the previous bundle,
// and the bundle's history entry says why). A replica restarted mid-hold
// resumes where the record is. A pin overrides any canary: nothing is
// judged while the target is pinned, and a hold in progress starts again
// once the pin is lifted.

// canaryTick is how often the judging replica looks at a canary.
const canaryTick = 250 * time.Millisecond

// canaryMinResponses is how many responses a frontend or backend must
// send during the hold for its 5xx share to be judged.
const canaryMinResponses = 10

// canaryUnreachableGrace is how long past the end of the hold a canary
// whose Runtime API does not answer is waited for before it is refused.
const canaryUnreachableGrace = 10 * time.Second

// statsView is HAProxy's own view of an instance (the runtime driver's
// Runtime API, when it has an admin socket).
type statsView interface {
	Stats(ctx context.Context) ([]runtime.Stat, error)
}

// errNoCanaryYet: the target has a canary configured and no canary record
// yet: nothing is ordered until the judge starts the first canary.
var errNoCanaryYet = errors.New("no canary started yet")

func (d *deployer) canaryConf(target string) *config.Canary {
	t, ok := d.cfg.Targets[target]
	if !ok {
		return nil
	}
	return t.Deploy.Canary
}

// readCanary returns target's canary record and its revision (nil, 0: none).
func (d *deployer) readCanary(ctx context.Context, target string) (*msg.Canary, uint64, error) {
	var c msg.Canary
	rev, err := msg.LoadStatus(ctx, d.status, msg.CanaryKey(target), &c)
	if err != nil {
		return nil, rev, msg.Retry(err, time.Second)
	}
	if rev == 0 {
		return nil, 0, nil
	}
	return &c, rev, nil
}

func (d *deployer) writeCanary(ctx context.Context, c msg.Canary, rev uint64) (uint64, error) {
	if _, err := msg.Encode(c); errors.Is(err, msg.ErrTooLarge) {
		// A configuration with very many proxies and servers: the views
		// do not fit in the record, so the canaries are judged by the
		// deploy outcome, and the record says so.
		d.env.Log.WarnContext(ctx, "HAProxy's view of the canaries is too large for the canary record; judged by the deploy outcome", "target", c.Target, "version", c.Version)
		c.Instances = slices.Clone(c.Instances)
		for i := range c.Instances {
			c.Instances[i].Before, c.Instances[i].Start = nil, nil
			c.Instances[i].Unobserved = "HAProxy's view is too large for the canary record: judged by the deploy outcome"
		}
	}
	rev, err := msg.StoreStatus(ctx, d.status, msg.CanaryKey(c.Target), c, rev)
	if err != nil {
		return 0, fmt.Errorf("canary of %s: %w", c.Target, err)
	}
	return rev, nil
}

// desiredFor is the bundle one instance of target should hold: the pinned
// one, else, with deploy.canary, the one the canary record gives it, else
// the last accepted one. A target with nothing accepted, or whose first
// canary is not started, is a permanent error.
func (d *deployer) desiredFor(ctx context.Context, target, instance string) (uint64, string, *msg.Pin, error) {
	version, hash, pin, err := d.desired(ctx, target)
	if err != nil || pin != nil || d.canaryConf(target) == nil {
		return version, hash, pin, err
	}
	c, _, err := d.readCanary(ctx, target)
	if err != nil {
		return 0, "", nil, err
	}
	if c == nil {
		return 0, "", nil, msg.Permanent(fmt.Errorf("%s: %w", target, errNoCanaryYet))
	}
	if v, h := c.For(instance, version); v != 0 {
		return v, h, nil, nil
	}
	return version, hash, nil, nil
}

// heldBundle is the one bundle an instance may be given while a pin or a
// canary holds its target.
type heldBundle struct {
	version uint64
	hash    string
	why     string
}

func (h *heldBundle) names(o msg.DeployOrder) bool {
	return h != nil && o.Version == h.version && o.BundleHash == h.hash
}

// held is what holds the order's instance: the pin, or the canary record
// about the last accepted bundle; nil: nothing (the last accepted bundle
// goes).
func (d *deployer) held(ctx context.Context, o msg.DeployOrder, vs msg.ValidationStatus, pin *msg.Pin) (*heldBundle, error) {
	if pin != nil {
		return &heldBundle{version: pin.Version, hash: pin.BundleHash, why: "pinned"}, nil
	}
	if d.canaryConf(o.Target) == nil {
		return nil, nil
	}
	c, _, err := d.readCanary(ctx, o.Target)
	if err != nil || c == nil {
		return nil, err
	}
	v, h := c.For(o.Instance, vs.LastGoodVersion)
	if v == 0 {
		return nil, nil
	}
	return &heldBundle{version: v, hash: h, why: fmt.Sprintf("canary of v%d %s", c.Version, c.Phase)}, nil
}

// judgeCanaries judges target's canaries while this replica holds the
// target's canary lease, until ctx is done.
func (d *deployer) judgeCanaries(ctx context.Context, target string, conf *config.Canary) error {
	key := msg.CanaryLeaseKey(target)
	l, err := lease.New(d.leases, key, d.env.Replica, msg.DeployLeaseTTL, lease.WithKeyTTL(d.env.JS, msg.LeaseSubject(key)))
	if err != nil {
		return err
	}
	defer l.Release()
	t := time.NewTicker(canaryTick)
	defer t.Stop()
	var last string // the last error logged, so a lasting one is logged once
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if held, _ := l.Try(ctx); !held {
			continue
		}
		err := d.canaryStep(ctx, target, conf)
		switch {
		case err == nil:
			last = ""
		case ctx.Err() != nil:
			return nil
		case err.Error() != last:
			last = err.Error()
			d.env.Log.WarnContext(ctx, "canary step failed; tried again", "target", target, "err", err)
		}
	}
}

// canaryStep moves target's canary one step on from what the status
// bucket says.
func (d *deployer) canaryStep(ctx context.Context, target string, conf *config.Canary) error {
	vs, err := d.validation(ctx, target)
	if err != nil || vs.LastGood == "" {
		return err
	}
	pin, err := d.readPin(ctx, target)
	if err != nil {
		return err
	}
	c, rev, err := d.readCanary(ctx, target)
	if err != nil {
		return err
	}
	if pin != nil {
		if c != nil && c.Phase == msg.CanaryHolding {
			// The canaries run the pinned bundle now: the hold starts
			// again once the pin is lifted and they run this one again.
			c.Phase, c.HoldFrom = msg.CanaryDeploying, time.Time{}
			for i := range c.Instances {
				c.Instances[i].Start = nil
			}
			_, err = d.writeCanary(ctx, *c, rev)
			d.env.Log.InfoContext(ctx, "target pinned during a canary's hold; the hold starts again once the pin is lifted", "target", target, "version", c.Version)
		}
		return err
	}
	switch {
	case c == nil || c.Version < vs.LastGoodVersion:
		return d.startCanary(ctx, target, conf, vs, c, rev)
	case c.Version != vs.LastGoodVersion || c.BundleHash != vs.LastGood:
		return fmt.Errorf("canary record names v%d %s, the validation status last accepted v%d %s", c.Version, c.BundleHash, vs.LastGoodVersion, vs.LastGood)
	case c.Phase == msg.CanaryDeploying:
		return d.canaryDeployed(ctx, c, rev)
	case c.Phase == msg.CanaryHolding:
		if c.HoldLeft(time.Now()) > 0 {
			return nil
		}
		return d.canaryJudge(ctx, conf, c, rev)
	case !c.Ordered:
		return d.canaryOrders(ctx, c, rev)
	}
	return nil
}

// startCanary starts the canary of the last accepted bundle: it reads
// HAProxy's view of each canary, records the canary, then orders the
// canaries the bundle. The previous bundle is the one the last canary
// released, or, for a target's first canary, the one the other instances
// run; without one (the first bundle), the bundle goes to every instance.
func (d *deployer) startCanary(ctx context.Context, target string, conf *config.Canary, vs msg.ValidationStatus, last *msg.Canary, rev uint64) error {
	names := d.cfg.Targets[target].Deploy.CanaryInstances()
	c := msg.Canary{Target: target, Version: vs.LastGoodVersion, BundleHash: vs.LastGood, Hold: conf.Hold.D(), StartedAt: time.Now().UTC(), Phase: msg.CanaryDeploying}
	if last != nil {
		c.PreviousVersion, c.PreviousHash = last.Released()
	} else {
		var err error
		if c.PreviousVersion, c.PreviousHash, err = d.runningElsewhere(ctx, target, names, vs.LastGoodVersion); err != nil {
			return err
		}
	}
	if c.PreviousVersion == 0 {
		c.Phase, c.DecidedAt, c.Reason = msg.CanaryPassed, c.StartedAt, "no previous bundle to compare with: deployed to every instance"
	}
	for _, name := range names {
		ci := msg.CanaryInstance{Instance: name}
		if c.Phase == msg.CanaryDeploying {
			ci.Before, ci.Unobserved = d.observe(ctx, target, name)
		}
		c.Instances = append(c.Instances, ci)
	}
	rev, err := d.writeCanary(ctx, c, rev)
	if err != nil {
		return err
	}
	d.env.Log.InfoContext(ctx, "canary started", "target", target, "version", c.Version, "canaries", names, "previous", c.PreviousVersion, "hold", c.Hold, "phase", c.Phase)
	if c.Phase == msg.CanaryPassed {
		return d.canaryOrders(ctx, &c, rev)
	}
	for _, name := range names {
		o := msg.DeployOrder{Target: target, Instance: name, Version: c.Version, BundleHash: c.BundleHash, Reason: msg.OrderCanary}
		id := fmt.Sprintf("%s.%s.canary-%d", target, name, c.Version)
		if _, err := bus.Publish(ctx, d.env.JS, msg.DeploySubject(target, name), id, o); err != nil {
			return err
		}
	}
	return nil
}

// runningElsewhere is the newest bundle older than version that an
// instance of target outside canaries runs (0: none runs one).
func (d *deployer) runningElsewhere(ctx context.Context, target string, canaries []string, version uint64) (uint64, string, error) {
	ins, _ := d.instances.of(target)
	var v uint64
	var h string
	for _, in := range ins {
		if slices.Contains(canaries, in.name) {
			continue
		}
		st, _, err := d.readStatus(ctx, in)
		if err != nil {
			return 0, "", err
		}
		if st.Version < version && st.Version > v && st.BundleHash != "" {
			v, h = st.Version, st.BundleHash
		}
	}
	return v, h, nil
}

// observe reads HAProxy's view of one instance; without one it says why.
func (d *deployer) observe(ctx context.Context, target, name string) (*msg.CanaryStats, string) {
	in := d.instance(target, name)
	if in == nil {
		return nil, "unknown instance"
	}
	if in.view == nil {
		return nil, "the " + in.driver + " driver has no Runtime API view (runtime driver with admin_socket only): judged by the deploy outcome"
	}
	s, err := readStats(ctx, in.view)
	if err != nil {
		d.env.Log.WarnContext(ctx, "canary: HAProxy's view not read; this canary is judged by the deploy outcome", "target", target, "instance", name, "err", err)
		return nil, "HAProxy's statistics could not be read before the deploy: " + err.Error()
	}
	return s, ""
}

func readStats(ctx context.Context, v statsView) (*msg.CanaryStats, error) {
	stats, err := v.Stats(ctx)
	if err != nil {
		return nil, err
	}
	s := &msg.CanaryStats{At: time.Now().UTC(), Proxies: map[string]msg.CanaryCounters{}, Servers: map[string]string{}}
	for _, st := range stats {
		switch st.Type {
		case "frontend", "backend":
			s.Proxies[st.Type+"/"+st.Proxy] = msg.CanaryCounters{Responses: st.Responses, Err5xx: st.Err5xx}
		case "server":
			s.Servers[st.Proxy+"/"+st.Name] = st.Status
		}
	}
	return s, nil
}

// canaryDeployed starts the hold once every canary runs the bundle, or
// refuses the bundle when a canary's driver refused it.
func (d *deployer) canaryDeployed(ctx context.Context, c *msg.Canary, rev uint64) error {
	for _, ci := range c.Instances {
		in := d.instance(c.Target, ci.Instance)
		if in == nil {
			return fmt.Errorf("canary instance %s is not an instance of %s", ci.Instance, c.Target)
		}
		st, _, err := d.readStatus(ctx, in)
		if err != nil {
			return err
		}
		if st.Version == c.Version && st.BundleHash == c.BundleHash {
			continue
		}
		if st.LastError != "" && st.Failures == 0 && st.LastErrorAt.After(c.StartedAt) {
			return d.canaryDecide(ctx, c, rev, fmt.Sprintf("canary: instance %s: deploy refused: %s", ci.Instance, st.LastError))
		}
		return nil // not deployed yet
	}
	for i, ci := range c.Instances {
		if ci.Unobserved != "" {
			continue
		}
		in := d.instance(c.Target, ci.Instance)
		s, err := readStats(ctx, in.view)
		if err != nil {
			return fmt.Errorf("canary instance %s: HAProxy's view at the start of the hold: %w", ci.Instance, err)
		}
		s.Servers = nil // judged against the view before the deploy
		c.Instances[i].Start = s
	}
	c.Phase, c.HoldFrom = msg.CanaryHolding, time.Now().UTC()
	if _, err := d.writeCanary(ctx, *c, rev); err != nil {
		return err
	}
	d.env.Log.InfoContext(ctx, "canary hold started", "target", c.Target, "version", c.Version, "hold", c.Hold)
	return nil
}

// canaryJudge compares, at the end of the hold, HAProxy's view of each
// canary with the one before the deploy.
func (d *deployer) canaryJudge(ctx context.Context, conf *config.Canary, c *msg.Canary, rev uint64) error {
	var reasons []string
	for _, ci := range c.Instances {
		if ci.Unobserved != "" || ci.Start == nil {
			continue // judged by the deploy outcome, which succeeded
		}
		end, err := readStats(ctx, d.instance(c.Target, ci.Instance).view)
		if err != nil {
			if time.Since(c.HoldFrom.Add(c.Hold)) < canaryUnreachableGrace {
				return fmt.Errorf("canary instance %s: HAProxy's view at the end of the hold: %w", ci.Instance, err)
			}
			reasons = append(reasons, fmt.Sprintf("instance %s: HAProxy's Runtime API does not answer: %v", ci.Instance, err))
			continue
		}
		for _, r := range judge(conf, ci.Before, ci.Start, end) {
			reasons = append(reasons, "instance "+ci.Instance+": "+r)
		}
	}
	reason := ""
	if len(reasons) > 0 {
		reason = "canary: " + strings.Join(reasons, "; ")
	}
	return d.canaryDecide(ctx, c, rev, reason)
}

// judge compares HAProxy's view of one canary before the deploy (before),
// at the start of the hold (start) and at its end (end), and returns what
// is wrong: servers UP before and DOWN at the end beyond
// max_servers_down, and frontends or backends whose share of 5xx
// responses during the hold (counter deltas from start to end) grew by
// more than max_5xx_ratio_increase over their share before the deploy.
func judge(conf *config.Canary, before, start, end *msg.CanaryStats) []string {
	var out []string
	down, total := map[string]int{}, map[string]int{}
	n := 0
	for key, status := range end.Servers {
		backend, _, _ := strings.Cut(key, "/")
		total[backend]++
		if before == nil || !strings.HasPrefix(before.Servers[key], "UP") || !strings.HasPrefix(status, "DOWN") {
			continue
		}
		down[backend]++
		n++
	}
	if n > conf.MaxServersDown {
		for _, b := range sortedKeys(down) {
			out = append(out, fmt.Sprintf("backend %s: %d of %d servers down", b, down[b], total[b]))
		}
	}
	for _, key := range sortedKeys(end.Proxies) {
		e := end.Proxies[key]
		s := start.Proxies[key]
		if e.Responses < s.Responses || e.Err5xx < s.Err5xx {
			s = msg.CanaryCounters{} // the counters started again (a reload)
		}
		resp, errs := e.Responses-s.Responses, e.Err5xx-s.Err5xx
		if resp < canaryMinResponses {
			continue
		}
		during := float64(errs) / float64(resp)
		was := 0.0
		if before != nil {
			if b := before.Proxies[key]; b.Responses > 0 {
				was = float64(b.Err5xx) / float64(b.Responses)
			}
		}
		if during-was > conf.MaxRatioIncrease() {
			kind, name, _ := strings.Cut(key, "/")
			out = append(out, fmt.Sprintf("%s %s: 5xx ratio %.2f during the hold (%d of %d responses), %.2f before", kind, name, during, errs, resp, was))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// canaryDecide records the verdict (reason empty: passed) and gives the
// orders that follow it.
func (d *deployer) canaryDecide(ctx context.Context, c *msg.Canary, rev uint64, reason string) error {
	c.Phase, c.Reason, c.DecidedAt = msg.CanaryPassed, "", time.Now().UTC()
	if reason != "" {
		c.Phase, c.Reason = msg.CanaryRefused, reason
	}
	rev, err := d.writeCanary(ctx, *c, rev)
	if err != nil {
		return err
	}
	if reason != "" {
		d.env.Log.ErrorContext(ctx, "canary refused the bundle; the canaries go back to the previous one", "target", c.Target, "version", c.Version, "previous", c.PreviousVersion, "reason", reason)
	} else {
		d.env.Log.InfoContext(ctx, "canary passed; the rest get the bundle", "target", c.Target, "version", c.Version)
	}
	return d.canaryOrders(ctx, c, rev)
}

// canaryOrders gives the orders a decided canary calls for (every
// instance the bundle, or the canaries the previous one), records a
// refusal in the history, and marks the record ordered.
func (d *deployer) canaryOrders(ctx context.Context, c *msg.Canary, rev uint64) error {
	ins, _ := d.instances.of(c.Target)
	for _, in := range ins {
		o := msg.DeployOrder{Target: c.Target, Instance: in.name, Version: c.Version, BundleHash: c.BundleHash, Reason: msg.OrderCanaryPassed}
		id := fmt.Sprintf("%s.%s.canary-%d-passed", c.Target, in.name, c.Version)
		if c.Phase == msg.CanaryRefused {
			if !c.IsCanary(in.name) || c.PreviousVersion == 0 {
				continue
			}
			o.Version, o.BundleHash, o.Reason = c.PreviousVersion, c.PreviousHash, msg.OrderCanaryRollback
			id = fmt.Sprintf("%s.%s.canary-%d-rollback", c.Target, in.name, c.Version)
		}
		if _, err := bus.Publish(ctx, d.env.JS, msg.DeploySubject(c.Target, in.name), id, o); err != nil {
			return err
		}
	}
	if c.Phase == msg.CanaryRefused {
		if err := d.recordCanaryRefusal(ctx, *c); err != nil {
			return err
		}
	}
	c.Ordered = true
	if _, err := d.writeCanary(ctx, *c, rev); err != nil {
		return err
	}
	d.m.canaries.WithLabelValues(c.Target, c.Phase).Inc()
	return nil
}

// recordCanaryRefusal marks the bundle refused in the target's history,
// with the canary's reason.
func (d *deployer) recordCanaryRefusal(ctx context.Context, c msg.Canary) error {
	return d.updateHistory(ctx, c.Target, c.Version, func(e *msg.HistoryEntry) bool {
		if !e.OK && e.Reason == c.Reason {
			return false
		}
		e.Target, e.Version, e.BundleHash = c.Target, c.Version, c.BundleHash
		e.OK, e.Reason, e.VerdictAt = false, c.Reason, c.DecidedAt
		return true
	})
}

// canaryRefused reports whether a history entry's refusal came from a
// canary (a verdict delivered again does not undo it).
func canaryRefused(e msg.HistoryEntry) bool {
	return !e.OK && strings.HasPrefix(e.Reason, "canary: ")
}
