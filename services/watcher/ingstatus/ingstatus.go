// Package ingstatus writes the addresses of a target's HAProxy fleet to
// status.loadBalancer.ingress of the Ingresses the target serves
// (weft.yaml: targets.<t>.ingress_status).
//
// Contract:
//   - One replica writes: the holder of the lease ingress-status.<target>
//     in weft-leases. Only while it holds the lease does a replica watch
//     the Ingresses and the address source and write; a replica that stops
//     releases the lease, one that dies loses it after LeaseTTL, and
//     another replica takes over.
//   - Level-based: every event (an Ingress, the Service or a Pod changed),
//     every resync and every retry looks at all Ingresses again from the
//     informers' caches, and writes only the statuses that differ from
//     what they should be. A write that fails is counted, logged and
//     retried with backoff; a conflict is looked at again.
//   - An Ingress is the target's as the ingress library selects it (see
//     Claims): its spec.ingressClassName, or without one its annotation
//     kubernetes.io/ingress.class, is the target's class or names an
//     IngressClass of the target's controller; with neither, a class of
//     the target is the cluster's default (or default_class says so).
//     Those get the addresses; a change of an IngressClass is looked at
//     as a change of the Ingresses. Ingresses of another class are never
//     written, except to clear the status this target wrote on an Ingress
//     that left its class: what the target wrote is recorded by the API
//     server itself, as the field manager FieldManager(target) owning
//     status.loadBalancer.ingress, so it survives restarts and failover.
//   - Addresses that cannot be read (the Service missing, not of type
//     LoadBalancer) are reported and change nothing: no status is
//     written from a missing answer.
package ingstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/watcher/statuslease"
)

// LeaseTTL is how long the ingress-status lease outlives its holder's
// last renewal: how soon another replica takes over from a dead one.
const LeaseTTL = 5 * time.Second

// LegacyClassAnnotation names an Ingress's class before ingressClassName.
const LegacyClassAnnotation = "kubernetes.io/ingress.class"

// Results of a status write (the result label of the writes metric).
const (
	ResultWritten  = "written"
	ResultCleared  = "cleared"
	ResultConflict = "conflict"
	ResultFailed   = "failed"
)

// ErrAddresses is an address source that gave no answer.
var ErrAddresses = errors.New("ingress status: addresses unavailable")

// FieldManager is the field manager of a target's status writes.
func FieldManager(target string) string { return "weft-ingress-status-" + target }

// Metrics counts status writes by result.
type Metrics struct {
	Writes *prometheus.CounterVec
}

// NewMetrics registers weft_<service>_ingress_status_writes_total.
func NewMetrics(reg prometheus.Registerer, service string) (*Metrics, error) {
	m := &Metrics{Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weft_" + service + "_ingress_status_writes_total",
		Help: "Ingress status writes, by result (written, cleared, conflict, failed).",
	}, []string{"result"})}
	if err := reg.Register(m.Writes); err != nil {
		return nil, fmt.Errorf("ingress status metrics: %w", err)
	}
	return m, nil
}

// Options configure the writer of one target.
type Options struct {
	Target  string
	Spec    config.IngressStatus
	Client  kubernetes.Interface
	Leases  statuslease.Leases
	Owner   string // this replica, unique among replicas
	Log     *slog.Logger
	Metrics *Metrics
}

// Run writes the target's Ingress statuses whenever this replica holds the
// lease, until ctx is done.
func Run(ctx context.Context, o Options) error {
	if o.Client == nil || o.Log == nil || o.Metrics == nil {
		return errors.New("ingress status: client, logger and metrics are required")
	}
	log := o.Log.With("target", o.Target, "class", o.Spec.Class)
	return statuslease.Run(ctx, statuslease.Holder{
		Leases: o.Leases, Target: o.Target, Key: msg.IngressStatusLeaseKey(o.Target), Owner: o.Owner, TTL: LeaseTTL,
		What: "ingress status", Doing: "writing the statuses of the class", Log: log,
	}, func(ctx context.Context) {
		w := &writer{o: o, log: log, poke: make(chan struct{}, 1), wrote: map[types.UID]written{}}
		w.run(ctx)
	})
}

// writer keeps the statuses while its context lasts (the lease is held).
type writer struct {
	o    Options
	log  *slog.Logger
	poke chan struct{}

	ingresses cache.Indexer
	classes   cache.Indexer
	addrs     *AddressSource

	// wrote is what this writer wrote on each Ingress, until the cache
	// shows a version newer than the one written on: a cache that has not
	// seen the write yet is not written again (it would conflict).
	wrote map[types.UID]written
}

type written struct {
	on     string // resourceVersion the write was made on
	status []netv1.IngressLoadBalancerIngress
}

func (w *writer) wake() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// run starts the informers, then reconciles on every event, resync and
// retry until ctx is done.
func (w *writer) run(ctx context.Context) {
	resync := w.o.Spec.Resync.D()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.wake() },
		UpdateFunc: func(any, any) { w.wake() },
		DeleteFunc: func(any) { w.wake() },
	}
	all := informers.NewSharedInformerFactory(w.o.Client, resync)
	ing := all.Networking().V1().Ingresses().Informer()
	w.ingresses = ing.GetIndexer()
	var synced []cache.InformerSynced
	if _, err := ing.AddEventHandler(handler); err != nil {
		w.log.ErrorContext(ctx, "ingress status: watching Ingresses", "err", err)
		return
	}
	synced = append(synced, ing.HasSynced)
	cls := all.Networking().V1().IngressClasses().Informer()
	w.classes = cls.GetIndexer()
	if _, err := cls.AddEventHandler(handler); err != nil {
		w.log.ErrorContext(ctx, "ingress status: watching IngressClasses", "err", err)
		return
	}
	synced = append(synced, cls.HasSynced)
	addrs, err := WatchAddresses(w.o.Client, w.o.Spec.From, resync, w.wake)
	if err != nil {
		w.log.ErrorContext(ctx, "ingress status", "err", err)
		return
	}
	w.addrs = addrs
	synced = append(synced, addrs.Synced...)
	factories := append([]informers.SharedInformerFactory{all}, addrs.Factories...)
	for _, f := range factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	statuslease.Loop(ctx, w.poke, resync, w.reconcile, func(err error, retryIn time.Duration) {
		w.log.WarnContext(ctx, "ingress status not in place; looking again", "err", err, "retry_in", retryIn)
	})
}

// reconcile writes every Ingress status that differs from what it should
// be, and returns the first reason to look again.
func (w *writer) reconcile(ctx context.Context) error {
	want, err := w.addrs.Addresses()
	if err != nil {
		w.log.ErrorContext(ctx, "ingress status: cannot read the instances' addresses; statuses left as they are", "err", err)
		return err
	}
	manager := FieldManager(w.o.Target)
	var errs []error
	seen := map[types.UID]bool{}
	var classes []*netv1.IngressClass
	for _, obj := range w.classes.List() {
		if c, ok := obj.(*netv1.IngressClass); ok {
			classes = append(classes, c)
		}
	}
	defer func() { maps.DeleteFunc(w.wrote, func(uid types.UID, _ written) bool { return !seen[uid] }) }()
	for _, obj := range w.ingresses.List() {
		ing, ok := obj.(*netv1.Ingress)
		if !ok {
			continue
		}
		seen[ing.UID] = true
		have := ing.Status.LoadBalancer.Ingress
		if wr, ok := w.wrote[ing.UID]; ok && wr.on == ing.ResourceVersion {
			have = wr.status // the cache has not seen the write yet
		} else {
			delete(w.wrote, ing.UID)
		}
		mine := Claims(w.o.Spec, classes, ing)
		var next []netv1.IngressLoadBalancerIngress
		switch {
		case mine:
			next = want
		case len(have) > 0 && WrittenBy(ing, manager):
			next = nil // left the class: clear what this target wrote
		default:
			continue // another class's: never touched
		}
		if Equal(have, next) {
			continue
		}
		if err := w.write(ctx, ing, next, manager); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// write updates one Ingress's status through the status subresource.
func (w *writer) write(ctx context.Context, ing *netv1.Ingress, next []netv1.IngressLoadBalancerIngress, manager string) error {
	up := ing.DeepCopy()
	up.Status.LoadBalancer.Ingress = next
	_, err := w.o.Client.NetworkingV1().Ingresses(ing.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{FieldManager: manager})
	name := ing.Namespace + "/" + ing.Name
	switch {
	case err == nil:
		w.wrote[ing.UID] = written{on: ing.ResourceVersion, status: next}
		result := ResultWritten
		if len(next) == 0 {
			result = ResultCleared
		}
		w.o.Metrics.Writes.WithLabelValues(result).Inc()
		w.log.InfoContext(ctx, "ingress status written", "ingress", name, "addresses", addressList(next))
		return nil
	case apierrors.IsNotFound(err):
		return nil // gone: nothing to write
	case apierrors.IsConflict(err):
		w.o.Metrics.Writes.WithLabelValues(ResultConflict).Inc()
		w.log.DebugContext(ctx, "ingress changed since it was read; looking again", "ingress", name)
		return fmt.Errorf("ingress %s: %w", name, err)
	case ctx.Err() != nil:
		return ctx.Err() // lease lost or stopping
	default:
		w.o.Metrics.Writes.WithLabelValues(ResultFailed).Inc()
		w.log.ErrorContext(ctx, "writing the ingress status failed; retrying", "ingress", name, "err", err)
		return fmt.Errorf("ingress %s: %w", name, err)
	}
}

// DefaultClassAnnotation marks the cluster's default IngressClass.
const DefaultClassAnnotation = "ingressclass.kubernetes.io/is-default-class"

// Claims reports whether ing is served by the target of spec, as the
// ingress library selects (pkg/render/library/ingress, "IngressClass"),
// given the cluster's IngressClasses. A class name is the target's when
// it is spec.Class (whether or not that class exists) or names an
// existing class whose spec.controller is spec.Controller. An Ingress is
// claimed when its spec.ingressClassName is the target's; without one,
// when its annotation kubernetes.io/ingress.class is; with neither, when
// a class of the target is marked default, or spec.DefaultClass says so.
func Claims(spec config.IngressStatus, classes []*netv1.IngressClass, ing *netv1.Ingress) bool {
	name := ""
	if c := ing.Spec.IngressClassName; c != nil {
		name = *c
	}
	if name == "" {
		name = ing.Annotations[LegacyClassAnnotation]
	}
	if name != "" {
		if name == spec.Class {
			return true
		}
		for _, c := range classes {
			if c.Name == name && spec.Controller != "" && c.Spec.Controller == spec.Controller {
				return true
			}
		}
		return false
	}
	if spec.DefaultClass {
		return true
	}
	for _, c := range classes {
		ours := c.Name == spec.Class || (spec.Controller != "" && c.Spec.Controller == spec.Controller)
		if ours && c.Annotations[DefaultClassAnnotation] == "true" {
			return true
		}
	}
	return false
}

// WrittenBy reports whether manager owns ing's status.loadBalancer.ingress
// (it wrote the addresses there last).
func WrittenBy(ing *netv1.Ingress, manager string) bool {
	for _, mf := range ing.ManagedFields {
		if mf.Manager != manager || mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Status struct {
				LoadBalancer map[string]json.RawMessage `json:"f:loadBalancer"`
			} `json:"f:status"`
		}
		if json.Unmarshal(mf.FieldsV1.Raw, &fields) == nil {
			if _, ok := fields.Status.LoadBalancer["f:ingress"]; ok {
				return true
			}
		}
	}
	return false
}

// FromService returns a LoadBalancer Service's addresses.
func FromService(svc *corev1.Service) []netv1.IngressLoadBalancerIngress {
	var out []netv1.IngressLoadBalancerIngress
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" && in.Hostname == "" {
			continue
		}
		out = append(out, netv1.IngressLoadBalancerIngress{IP: in.IP, Hostname: in.Hostname})
	}
	return out
}

// FromPods returns the distinct host or pod IPs (address: config.PodHostIP
// or config.PodPodIP) of the running Pods, sorted.
func FromPods(pods []*corev1.Pod, address string) []netv1.IngressLoadBalancerIngress {
	var ips []string
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		ip := p.Status.HostIP
		if address == config.PodPodIP {
			ip = p.Status.PodIP
		}
		if ip != "" {
			ips = append(ips, ip)
		}
	}
	slices.Sort(ips)
	return FromAddresses(slices.Compact(ips))
}

// FromAddresses turns IPs and DNS names into status entries.
func FromAddresses(addrs []string) []netv1.IngressLoadBalancerIngress {
	var out []netv1.IngressLoadBalancerIngress
	for _, a := range addrs {
		if _, err := netip.ParseAddr(a); err == nil {
			out = append(out, netv1.IngressLoadBalancerIngress{IP: a})
		} else {
			out = append(out, netv1.IngressLoadBalancerIngress{Hostname: a})
		}
	}
	return out
}

// Equal compares two statuses' addresses (IP and hostname, in order).
func Equal(a, b []netv1.IngressLoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y netv1.IngressLoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && len(x.Ports) == 0 && len(y.Ports) == 0
	})
}

func addressList(in []netv1.IngressLoadBalancerIngress) string {
	var s []string
	for _, a := range in {
		s = append(s, a.IP+a.Hostname)
	}
	return strings.Join(s, ",")
}
