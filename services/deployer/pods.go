package deployer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
)

// podFollower keeps a target's instances equal to its ready, selected Pods,
// as the watcher stores them in the resources bucket: a Pod that becomes
// ready is an instance (its own consumer, and the last accepted bundle
// ordered at once); one that goes away, stops being ready or changes its
// address is removed (its consumer and status with it). Once the bucket's
// current Pods are read, the consumers and statuses of the target's other
// instances are removed too: Pods that went away or stopped being ready
// while no deployer followed them. An instance is only removed this way once
// the bucket, read again, holds no ready, selected Pod for it: a Pod
// another replica added after this one's first read is left to it, so one
// replica never removes a consumer another is using.
type podFollower struct {
	d      *deployer
	target string
	deploy config.Deploy
	sel    labels.Selector
	orders bus.Options

	wg      sync.WaitGroup
	running map[string]podInstance // by instance name
}

type podInstance struct {
	url  string
	stop context.CancelFunc
}

func newPodFollower(d *deployer, target string, t config.Target, orders bus.Options) (*podFollower, error) {
	sel, err := labels.Parse(t.Deploy.Pods.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("deployer: target %s: deploy.pods.label_selector: %w", target, err)
	}
	return &podFollower{d: d, target: target, deploy: t.Deploy, sel: sel, orders: orders, running: map[string]podInstance{}}, nil
}

// follow watches the Pods until ctx is done. A watch that ends (the NATS
// node serving it went away) is started again; its first read of the
// current Pods removes the instances of Pods that went away meanwhile.
func (p *podFollower) follow(ctx context.Context) error {
	defer func() {
		for _, r := range p.running {
			r.stop()
		}
		p.wg.Wait()
	}()
	delay := 100 * time.Millisecond
	for {
		err := p.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.d.env.Log.Warn("pod watch ended; watching again", "target", p.target, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// watch follows the Pods through one watch of the bucket, until it ends.
func (p *podFollower) watch(ctx context.Context) error {
	var kv jetstream.KeyValue
	err := msg.Open(ctx, "watch pods of "+p.target, func(octx context.Context) (err error) {
		kv, err = p.d.env.JS.KeyValue(octx, msg.BucketResources)
		return err
	})
	if err != nil {
		return err
	}
	// The watch lives as long as ctx: not inside Open, whose tries end.
	w, err := msg.Watch(ctx, kv, []string{"*." + p.deploy.Pods.Type + ".>"})
	if err != nil {
		return fmt.Errorf("watch pods of %s: %w", p.target, err)
	}
	defer msg.StopWatch(w)
	seen := map[string]bool{} // instances named by the first read
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch closed")
			}
			if e == nil { // the current Pods are read
				if initial {
					p.forgetUnseen(ctx, seen)
					p.sweep(ctx)
					initial = false
				}
				continue
			}
			if initial {
				if _, _, ns, pod, err := msg.ParseResourceKey(e.Key()); err == nil {
					seen[podInstanceName(ns, pod)] = true
				}
			}
			p.update(ctx, e)
		}
	}
}

// forgetUnseen removes the running instances whose Pods a new watch's
// first read did not name: they went away while no watch ran.
func (p *podFollower) forgetUnseen(ctx context.Context, seen map[string]bool) {
	for name := range p.running {
		if !seen[name] {
			p.remove(ctx, name)
		}
	}
}

func (p *podFollower) update(ctx context.Context, e jetstream.KeyValueEntry) {
	_, _, ns, pod, err := msg.ParseResourceKey(e.Key())
	if err != nil {
		return
	}
	name := podInstanceName(ns, pod)
	url := ""
	if e.Operation() == jetstream.KeyValuePut {
		var r msg.Resource
		if err := msg.Decode(e.Value(), &r); err != nil {
			p.d.env.Log.Warn("unreadable pod in the resources bucket", "key", e.Key(), "err", err)
			return
		}
		url = p.endpoint(r.Object)
	}
	cur, running := p.running[name]
	switch {
	case running && cur.url == url:
		return
	case running:
		p.remove(ctx, name)
	}
	if url != "" {
		p.add(ctx, name, url)
	}
}

// endpoint is the Dataplane API address of a selected, ready Pod, or "".
func (p *podFollower) endpoint(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	status, _ := obj["status"].(map[string]any)
	if meta == nil || status == nil || meta["deletionTimestamp"] != nil {
		return ""
	}
	lbls := labels.Set{}
	if m, ok := meta["labels"].(map[string]any); ok {
		for k, v := range m {
			lbls[k], _ = v.(string)
		}
	}
	ip, _ := status["podIP"].(string)
	if !p.sel.Matches(lbls) || ip == "" || !podReady(status) {
		return ""
	}
	host := ip
	if strings.Contains(ip, ":") {
		host = "[" + ip + "]"
	}
	return fmt.Sprintf("%s://%s:%d", p.deploy.Pods.Scheme, host, p.deploy.Pods.Port)
}

func podReady(status map[string]any) bool {
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}

// podInstanceName is a subject token naming the Pod namespace/name:
// pod-<namespace>_<name>, with the dots of the name as "_". Kubernetes names
// have no "_" and namespaces no dots, so the first "_" ends the namespace
// and no two Pods share a name.
func podInstanceName(ns, pod string) string {
	return "pod-" + ns + "_" + strings.ReplaceAll(pod, ".", "_")
}

// podOfInstance reads podInstanceName back: the Pod's namespace and name.
func podOfInstance(name string) (ns, pod string, ok bool) {
	rest, ok := strings.CutPrefix(name, "pod-")
	if !ok {
		return "", "", false
	}
	ns, pod, ok = strings.Cut(rest, "_")
	return ns, strings.ReplaceAll(pod, "_", "."), ok && ns != "" && pod != ""
}

func (p *podFollower) add(ctx context.Context, name, url string) {
	dep := p.deploy
	dep.Instance, dep.Dataplane.URL, dep.Pods = name, url, nil
	a, err := newApplier(p.target, "", dep)
	if err != nil {
		p.d.env.Log.Error("pod not usable as an instance", "target", p.target, "instance", name, "err", err)
		return
	}
	in := &instance{target: p.target, name: name, driver: dep.Driver, apply: a}
	// Only orders from now on: older ones were for an earlier Pod of
	// that name, and the catch-up below brings this one up to date.
	cons, renew, err := p.d.openConsumer(ctx, in, jetstream.DeliverNewPolicy)
	if err != nil {
		p.d.env.Log.Error("pod instance without consumer", "target", p.target, "instance", name, "err", err)
		return
	}
	p.d.instances.add(in)
	ictx, stop := context.WithCancel(ctx)
	p.running[name] = podInstance{url: url, stop: stop}
	o := p.orders
	o.AckWait, o.Renew = deployAckWait, renew
	p.wg.Go(func() {
		if err := bus.Consume(ictx, cons, p.d.onOrder, o); err != nil && ictx.Err() == nil {
			p.d.env.Log.Error("orders of a pod instance stopped", "target", p.target, "instance", name, "err", err)
		}
	})
	p.d.env.Log.Info("pod instance added", "target", p.target, "instance", name, "url", url)
	// Read after the instance was added, so that it gets either the
	// order of a verdict or this catch-up.
	version, hash, _, err := p.d.desired(ctx, p.target)
	if err == nil {
		// Not de-duplicated: a Pod recreated under the same name needs
		// the bundle again.
		err = p.d.order(ctx, []*instance{in}, version, hash, msg.OrderCatchUp, nil)
	}
	if err != nil && !msg.IsPermanent(err) {
		p.d.env.Log.Warn("new pod instance not ordered its bundle yet", "target", p.target, "instance", name, "err", err)
	}
}

func (p *podFollower) remove(ctx context.Context, name string) {
	p.running[name].stop()
	delete(p.running, name)
	p.d.instances.remove(p.target, name)
	p.drop(ctx, name)
	p.d.env.Log.Info("pod instance removed", "target", p.target, "instance", name)
}

// drop deletes the consumer and the status of a Pod instance.
func (p *podFollower) drop(ctx context.Context, name string) {
	if err := p.d.env.JS.DeleteConsumer(ctx, msg.StreamDeploys, InstanceConsumer(p.target, name)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		p.d.env.Log.Warn("consumer of a removed pod instance not deleted", "target", p.target, "instance", name, "err", err)
	}
	if err := p.d.status.Delete(ctx, msg.DeployStatusKey(p.target, name)); err != nil {
		p.d.env.Log.Warn("status of a removed pod instance not deleted", "target", p.target, "instance", name, "err", err)
	}
}

// sweep drops the consumers and statuses of the target's instances that are
// not running: every instance of a target with deploy.pods is a Pod's.
func (p *podFollower) sweep(ctx context.Context) {
	known := map[string]bool{}
	keys, err := p.d.status.ListKeysFiltered(ctx, msg.DeployStatusKey(p.target, "*"))
	if err == nil {
		for k := range keys.Keys() { // closed once all are listed
			known[strings.TrimPrefix(k, msg.DeployStatusPrefix(p.target))] = true
		}
	}
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		p.d.env.Log.Warn("statuses of gone pod instances not listed", "target", p.target, "err", err)
	}
	st, err := p.d.env.JS.Stream(ctx, msg.StreamDeploys)
	if err == nil {
		consumers := st.ListConsumers(ctx)
		for info := range consumers.Info() {
			name := msg.SubjectToken(info.Config.FilterSubject, 3)
			if info.Config.FilterSubject == msg.DeploySubject(p.target, name) && info.Name == InstanceConsumer(p.target, name) {
				known[name] = true
			}
		}
		err = consumers.Err()
	}
	if err != nil {
		p.d.env.Log.Warn("consumers of gone pod instances not listed", "target", p.target, "err", err)
	}
	for name := range known {
		if _, ok := p.running[name]; ok {
			continue
		}
		if present, err := p.present(ctx, name); present || err != nil {
			if err != nil {
				p.d.env.Log.Warn("pod instance left in place: its Pod could not be read", "target", p.target, "instance", name, "err", err)
			}
			continue // added after the first read: another replica's, and this one's soon
		}
		p.drop(ctx, name)
		p.d.env.Log.Info("gone pod instance removed", "target", p.target, "instance", name)
	}
}

// present reads the resources bucket again (from its stream's leader) for
// a ready, selected Pod named by instance name.
func (p *podFollower) present(ctx context.Context, name string) (bool, error) {
	ns, pod, ok := podOfInstance(name)
	if !ok {
		return false, nil
	}
	kv, err := p.d.env.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		return false, err
	}
	keys, err := kv.ListKeysFiltered(ctx, msg.ResourceKey("*", p.deploy.Pods.Type, ns, pod))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var found []string
	for k := range keys.Keys() {
		found = append(found, k)
	}
	for _, k := range found {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		var r msg.Resource
		if msg.Decode(e.Value(), &r) == nil && p.endpoint(r.Object) != "" {
			return true, nil
		}
	}
	return false, nil
}
