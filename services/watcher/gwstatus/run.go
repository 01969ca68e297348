package gwstatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/ingstatus"
	"github.com/weftio/weft/services/watcher/statuslease"
)

// StatusFile is the bundle file the gateway library renders the status in.
const StatusFile = "files/gateway-status.json"

// LeaseTTL is how long the gateway-status lease outlives its holder's
// last renewal: how soon another replica takes over from a dead one.
const LeaseTTL = 5 * time.Second

// Results of writing one object (the result label of the writes metric).
const (
	ResultWritten = "written"
	ResultMissing = "missing"
	ResultFailed  = "failed"
	// ResultInvalid: the served bundle has no usable status file; nothing
	// is written until another bundle is served.
	ResultInvalid = "invalid"
)

// Metrics counts status writes by result.
type Metrics struct {
	Writes *prometheus.CounterVec
}

// NewMetrics registers weft_<service>_gateway_status_writes_total.
func NewMetrics(reg prometheus.Registerer, service string) (*Metrics, error) {
	m := &Metrics{Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weft_" + service + "_gateway_status_writes_total",
		Help: "Gateway API status writes, by result (written and missing: objects; failed: writes that failed; invalid: bundles without a usable status file).",
	}, []string{"result"})}
	if err := reg.Register(m.Writes); err != nil {
		return nil, fmt.Errorf("gateway status metrics: %w", err)
	}
	return m, nil
}

// Options configure the status writer of one target.
type Options struct {
	Target string
	Spec   config.GatewayStatus
	// Client writes the Gateway API objects; Kube reads the addresses of
	// Spec.From.
	Client dynamic.Interface
	Kube   kubernetes.Interface
	// Status is the status bucket (the target's validation status and
	// pin); Bundles the store of the bundles they name.
	Status  jetstream.KeyValue
	Bundles *msg.BundleStore
	Leases  statuslease.Leases
	Owner   string // this replica, unique among replicas
	Log     *slog.Logger
	Metrics *Metrics
}

// Run writes the status of the target's served bundle whenever this
// replica holds the lease gateway-status.<target>, until ctx is done.
func Run(ctx context.Context, o Options) error {
	if o.Client == nil || o.Status == nil || o.Bundles == nil || o.Log == nil || o.Metrics == nil {
		return errors.New("gateway status: client, status bucket, bundle store, logger and metrics are required")
	}
	if o.Spec.From != nil && o.Kube == nil {
		return errors.New("gateway status: from needs a kubernetes client")
	}
	log := o.Log.With("target", o.Target)
	return statuslease.Run(ctx, statuslease.Holder{
		Leases: o.Leases, Target: o.Target, Key: msg.GatewayStatusLeaseKey(o.Target), Owner: o.Owner, TTL: LeaseTTL,
		What: "gateway status", Doing: "writing the served bundle's Gateway API status", Log: log,
	}, func(ctx context.Context) {
		r := &runner{o: o, log: log, poke: make(chan struct{}, 1),
			w: &Writer{Client: o.Client, ControllerName: o.Spec.ControllerName}}
		r.run(ctx)
	})
}

// runner keeps the status while its context lasts (the lease is held).
type runner struct {
	o     Options
	log   *slog.Logger
	poke  chan struct{}
	w     *Writer
	addrs *ingstatus.AddressSource // nil without from

	mu     sync.Mutex
	served string // hash of the served bundle: the pin's, else the last accepted
	pinned string
	good   string

	loaded string  // hash of the bundle st was read from
	st     *Status // nil: the loaded bundle has no usable status
}

func (r *runner) wake() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// run follows the served bundle and the addresses, and writes on every
// change, resync and retry until ctx is done.
func (r *runner) run(ctx context.Context) {
	if from := r.o.Spec.From; from != nil {
		a, err := ingstatus.WatchAddresses(r.o.Kube, *from, r.o.Spec.Resync.D(), r.wake)
		if err != nil {
			r.log.ErrorContext(ctx, "gateway status", "err", err)
			return
		}
		for _, f := range a.Factories {
			f.Start(ctx.Done())
			defer f.Shutdown()
		}
		if !cache.WaitForCacheSync(ctx.Done(), a.Synced...) {
			return
		}
		r.addrs = a
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		r.follow(ctx)
	}()
	defer func() { <-watchDone }()
	statuslease.Loop(ctx, r.poke, r.o.Spec.Resync.D(), r.reconcile, func(err error, retryIn time.Duration) {
		r.log.WarnContext(ctx, "gateway status not in place; trying again", "err", err, "retry_in", retryIn)
	})
}

// follow watches the target's validation status and pin, keeping served
// up to date, until ctx is done; a watch that breaks is started again.
func (r *runner) follow(ctx context.Context) {
	keys := []string{msg.ValidationStatusKey(r.o.Target), msg.PinKey(r.o.Target)}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		w, err := msg.Watch(ctx, r.o.Status, keys)
		if err == nil {
			backoff = 0
			for e := range w.Updates() {
				if e != nil {
					r.see(ctx, e)
				}
			}
			_ = w.Stop()
			if ctx.Err() != nil {
				return
			}
			err = errors.New("watch ended")
		}
		backoff = statuslease.Backoff(backoff)
		r.log.WarnContext(ctx, "gateway status: watching the target's status; watching again", "err", err, "retry_in", backoff)
		if pause.For(ctx, backoff) != nil {
			return
		}
	}
}

// see takes one status key's entry.
func (r *runner) see(ctx context.Context, e jetstream.KeyValueEntry) {
	deleted := e.Operation() != jetstream.KeyValuePut
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Key() {
	case msg.PinKey(r.o.Target):
		var p msg.Pin
		switch {
		case deleted:
			r.pinned = ""
		case msg.Decode(e.Value(), &p) != nil:
			r.log.ErrorContext(ctx, "gateway status: unreadable pin; ignored", "key", e.Key())
		default:
			r.pinned = p.BundleHash
		}
	default:
		var vs msg.ValidationStatus
		switch {
		case deleted:
			r.good = ""
		case msg.Decode(e.Value(), &vs) != nil:
			r.log.ErrorContext(ctx, "gateway status: unreadable validation status; ignored", "key", e.Key())
		case vs.LastGood != "":
			r.good = vs.LastGood
		}
	}
	served := r.good
	if r.pinned != "" {
		served = r.pinned
	}
	if served != r.served {
		r.served = served
		r.wake()
	}
}

// reconcile writes the served bundle's status, with the addresses, and
// returns the reason to try again.
func (r *runner) reconcile(ctx context.Context) error {
	r.mu.Lock()
	served := r.served
	r.mu.Unlock()
	if served == "" {
		return nil // nothing accepted yet
	}
	if served != r.loaded {
		st, err := r.load(ctx, served)
		switch {
		case errors.Is(err, ErrStatus):
			r.loaded, r.st = served, nil
			r.o.Metrics.Writes.WithLabelValues(ResultInvalid).Inc()
			r.log.ErrorContext(ctx, "gateway status: the served bundle has no usable status; nothing written until another is served", "bundle", served, "err", err)
			return nil
		case err != nil:
			r.o.Metrics.Writes.WithLabelValues(ResultFailed).Inc()
			return fmt.Errorf("bundle %s: %w", served, err)
		}
		r.loaded, r.st = served, st
	}
	if r.st == nil {
		return nil
	}
	st := r.st
	if r.addrs != nil {
		in, err := r.addrs.Addresses()
		if err != nil {
			r.o.Metrics.Writes.WithLabelValues(ResultFailed).Inc()
			r.log.ErrorContext(ctx, "gateway status: cannot read the instances' addresses; statuses left as they are", "err", err)
			return err
		}
		addrs := make([]Address, 0, len(in))
		for _, a := range in {
			if a.IP != "" {
				addrs = append(addrs, Address{Type: AddressIP, Value: a.IP})
			} else {
				addrs = append(addrs, Address{Type: AddressHostname, Value: a.Hostname})
			}
		}
		st = WithAddresses(st, addrs)
	}
	res, err := r.w.Write(ctx, st)
	r.o.Metrics.Writes.WithLabelValues(ResultWritten).Add(float64(res.Written))
	r.o.Metrics.Writes.WithLabelValues(ResultMissing).Add(float64(res.Missing))
	if res.Written > 0 {
		r.log.InfoContext(ctx, "gateway status written", "bundle", served, "written", res.Written, "unchanged", res.Unchanged, "missing", res.Missing)
	}
	if err != nil && ctx.Err() == nil {
		r.o.Metrics.Writes.WithLabelValues(ResultFailed).Inc()
		r.log.ErrorContext(ctx, "writing the gateway status failed; retrying", "bundle", served, "err", err)
	}
	return err
}

// load reads the status file of bundle hash; errors wrapping ErrStatus
// are a bundle without a usable one.
func (r *runner) load(ctx context.Context, hash string) (*Status, error) {
	b, err := r.o.Bundles.LoadBundle(ctx, hash)
	if err != nil {
		return nil, err
	}
	for _, f := range b.Files {
		if f.Path == StatusFile {
			return Decode(f.Content)
		}
	}
	return nil, fmt.Errorf("%w: no %s in the bundle (is the target's library gateway?)", ErrStatus, StatusFile)
}
