package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/sdnotify"
)

// notifySystemd tells systemd, when it started the process as
// Type=notify, how the process is: STATUS= lines while it starts and when
// a deploy fails, READY=1 once every target of the running configuration
// (those of site) has been deployed by this process to at least one
// instance, the watchdog (WATCHDOG_USEC) petted every half interval while
// /readyz's checks pass, and STOPPING=1 when ctx ends. Errors of sending
// are logged at WARN, once each.
func notifySystemd(ctx context.Context, env svc.Env, n *sdnotify.Notifier, site string, current func() *config.Config) error {
	if n == nil {
		return nil
	}
	var lastErr string
	notify := func(states ...string) {
		if err := n.Notify(states...); err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			env.Log.Warn("systemd notify", "err", err)
		}
	}
	interval, err := sdnotify.WatchdogInterval()
	if err != nil {
		env.Log.Warn("systemd watchdog off", "err", err)
	}
	go n.Watchdog(ctx, interval, env.Health.Ready, func(err error) { env.Log.Warn("systemd watchdog", "err", err) })
	defer notify(sdnotify.Stopping, sdnotify.Status("stopping"))
	notify(sdnotify.Status("started; waiting for the first deploy of every target"))
	started := time.Now()
	kv, err := env.JS.KeyValue(ctx, msg.BucketStatus)
	for err != nil {
		// Provisioning may still be under way.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		kv, err = env.JS.KeyValue(ctx, msg.BucketStatus)
	}
	w, err := msg.Watch(ctx, kv, []string{"deploy.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("systemd notify: watch %s: %w", msg.BucketStatus, err)
	}
	defer msg.StopWatch(w)
	d := deploys{started: started, site: site, by: map[string]msg.DeployStatus{}}
	tick := time.NewTicker(time.Second) // a new configuration's targets
	defer tick.Stop()
	ready := false
	var status string
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("systemd notify: the status watch ended")
			}
			if e != nil {
				var s msg.DeployStatus
				if msg.Decode(e.Value(), &s) == nil {
					d.by[e.Key()] = s
				}
			}
		case <-tick.C:
		}
		now, done := d.describe(current())
		if done && !ready {
			ready = true
			notify(sdnotify.Ready, sdnotify.Status(now))
			status = now
			continue
		}
		if now != status {
			status = now
			notify(sdnotify.Status(now))
		}
	}
}

// deploys are the deploy statuses seen, by key.
type deploys struct {
	started time.Time
	site    string
	by      map[string]msg.DeployStatus
}

// describe says how the targets of cfg stand, and whether each has been
// deployed since the process started.
func (d deploys) describe(cfg *config.Config) (string, bool) {
	if cfg == nil {
		return "waiting for a configuration", false
	}
	var waiting, failing, done []string
	for _, name := range cfg.TargetNames() {
		if cfg.Targets[name].Deploy.Site != d.site {
			continue
		}
		ok := false
		for _, s := range d.by {
			if s.Target != name || s.At.Before(d.started) {
				continue
			}
			switch {
			case s.LastError != "": // refused or failing, until one succeeds
				failing = append(failing, fmt.Sprintf("%s/%s (%s)", name, s.Instance, s.LastError))
			case s.Deploys > 0:
				ok = true
			}
		}
		if ok {
			done = append(done, name)
		} else {
			waiting = append(waiting, name)
		}
	}
	slices.Sort(failing)
	var b strings.Builder
	if len(waiting) == 0 {
		fmt.Fprintf(&b, "ready: %d deployed (%s)", len(done), strings.Join(done, ", "))
	} else {
		fmt.Fprintf(&b, "waiting for the first deploy of %s", strings.Join(waiting, ", "))
	}
	if len(failing) > 0 {
		fmt.Fprintf(&b, "; deploys failing: %s", strings.Join(failing, "; "))
	}
	return b.String(), len(waiting) == 0
}
