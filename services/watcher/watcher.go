// Package watcher turns sources of state into the resources bucket and
// change messages. Each configured source runs on its own goroutine and
// reports to a sink (the source contract is in package source); the sink
// writes objects with package store, and the relay (package relay)
// announces every write as a change message. After a type's first complete
// listing the sink writes its sync marker (status bucket and
// weft.sync.<source>.<type>), naming the bucket revision a reader must have
// seen; nothing downstream renders before every marker is in. From then on
// the sync status also holds the type's current object count: every write
// marks the type's count dirty and the sink rewrites the status at most once
// per CountInterval, so the count follows the bucket at any number of
// objects. Each replica writes the count it sees; replicas that follow the
// same source see the same objects, and each rewrites its count whenever
// that changes, so the last write holds the count they all converge on.
// Problems a source reports are logged, counted and kept in the sync status.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/services/watcher/relay"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/source/exports"
	"github.com/weftio/weft/services/watcher/source/kube"
	"github.com/weftio/weft/services/watcher/source/kv"
	"github.com/weftio/weft/services/watcher/source/manifests"
	"github.com/weftio/weft/services/watcher/store"
)

// Service is the name in metrics, logs and the DLQ subject.
const Service = "watcher"

type metrics struct {
	objects  *prometheus.GaugeVec
	applies  *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_watcher_objects", Help: "Objects held per source and type.",
		}, []string{"source", "type"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_watcher_changes_total", Help: "Objects written or deleted, by source, type and op.",
		}, []string{"source", "type", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_watcher_source_errors_total", Help: "Source problems (unparseable manifests, store errors), by source.",
		}, []string{"source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_watcher_apply_duration_seconds", Help: "Time to apply one listing, or one object's change, of a source.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"source"}),
	}
	return m, svc.Register(reg, Service, m.objects, m.applies, m.errors, m.duration)
}

// Run watches every source of cfg until ctx is done.
func Run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	if err := env.Check(); err != nil {
		return err
	}
	env = env.For(Service)
	m, err := newMetrics(env.Registry)
	if err != nil {
		return err
	}
	bm, err := bus.NewMetrics(Service, env.Registry)
	if err != nil {
		return err
	}
	var kv, status jetstream.KeyValue
	var stream jetstream.Stream
	if err := msg.Open(ctx, "watcher: buckets", func(ctx context.Context) (err error) {
		if kv, err = env.JS.KeyValue(ctx, msg.BucketResources); err != nil {
			return err
		}
		if status, err = env.JS.KeyValue(ctx, msg.BucketStatus); err != nil {
			return err
		}
		stream, err = env.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
		return err
	}); err != nil {
		return err
	}
	cons, renew, err := relay.Consumer(ctx, env.JS)
	if err != nil {
		return err
	}
	opts := bus.Options{Service: Service, Log: env.Log, Tracer: env.Tracer.Tracer(Service), Metrics: bm, DLQ: env.JS}
	stage := func(s string) bus.Options { o := opts; o.Stage = s; return o }
	g, ctx := errgroup.WithContext(ctx)
	for _, renew := range relay.Renewals(renew, relay.Workers) {
		relayed := stage("relay")
		relayed.AckWait, relayed.Renew, relayed.Health = relay.AckWait, renew, env.Health
		g.Go(func() error { return bus.Consume(ctx, cons, relay.New(env.JS).Handle, relayed) })
	}
	for _, src := range cfg.Sources {
		s, err := newSource(env, cfg, src)
		if err != nil {
			return fmt.Errorf("watcher: source %s: %w", src.Name, err)
		}
		types := cfg.SourceTypes(src)
		st, err := store.New(src.Name, types, cfg.IgnorePaths(), kv, stream, env.JS)
		if err != nil {
			return err
		}
		k := newSink(env, src.Name, types, st, stream, status, m)
		env.Health.Pending("watcher/" + src.Name)
		g.Go(func() error { return k.reportCounts(ctx) })
		g.Go(func() error {
			if err := s.Run(ctx, k); err != nil {
				return fmt.Errorf("watcher: source %s: %w", src.Name, err)
			}
			return nil
		})
		if f, ok := s.(fetcher); ok {
			g.Go(func() error {
				return bus.Serve(ctx, env.NC, msg.FetchSubject(src.Name), "weft-watcher-fetch-"+src.Name, onFetch(f), stage("fetch"))
			})
		}
		if r, ok := s.(resyncer); ok {
			g.Go(func() error {
				return bus.Serve(ctx, env.NC, msg.TriggerResyncSubject(src.Name), "weft-watcher-"+src.Name, k.onTrigger(r), stage("trigger-resync"))
			})
		}
	}
	if err := runIngressStatus(ctx, g, env, cfg); err != nil {
		return err
	}
	if err := runGatewayStatus(ctx, g, env, cfg, status); err != nil {
		return err
	}
	return g.Wait()
}

// newSource builds the source of one configured source.
func newSource(env svc.Env, cfg *config.Config, src config.Source) (source.Source, error) {
	switch src.Type {
	case config.SourceManifests:
		return manifests.NewSource(src.Path, src.Rescan.D(), cfg.ResourceTypes(), cfg.TypeFor), nil
	case config.SourceKubernetes:
		rc, err := kubeclient.RESTConfig(src.Kubeconfig, src.Context)
		if err != nil {
			return nil, err
		}
		return kube.New(kube.Options{Config: rc, Types: cfg.WatchedResources, Strip: cfg.IgnorePaths(), Resync: src.Resync.D()})
	case config.SourceExports:
		rc, err := kubeclient.RESTConfig(src.Kubeconfig, src.Context)
		if err != nil {
			return nil, err
		}
		return exports.New(exports.Options{Config: rc, Exports: src.Exports, Resync: src.Resync.D()})
	case config.SourceNATSKV, config.SourceEnv, config.SourceFile, config.SourceEtcd, config.SourceRedis, config.SourceConsul, config.SourceZookeeper:
		var opts []kv.Option
		if src.Type == config.SourceNATSKV && src.Address == "" {
			opts = append(opts, kv.WithNATSConn(env.NC)) // the NATS weft runs on
		}
		return kv.New(src, opts...)
	}
	return nil, fmt.Errorf("source type %q cannot run in this build", src.Type)
}

// fetcher is a source that can read one object's full body on request
// (objects kept on demand).
type fetcher interface {
	Fetch(ctx context.Context, typ, namespace, name string) (map[string]any, error)
}

// onFetch answers weft.api.fetch.<source>.
func onFetch(f fetcher) bus.CoreHandler {
	return func(ctx context.Context, m *nats.Msg) error {
		var req msg.FetchRequest
		err := msg.Decode(m.Data, &req)
		var rep msg.FetchReply
		if err == nil {
			rep.Object, err = f.Fetch(ctx, req.Type, req.Namespace, req.Name)
		}
		if err != nil {
			rep = msg.FetchReply{Error: err.Error()}
		}
		if m.Reply != "" {
			if out, eerr := msg.NewMsg(m.Reply, "", rep); eerr == nil {
				_ = m.RespondMsg(out)
			}
		}
		if err != nil && msg.IsPermanent(err) {
			return err // a malformed request: dead-lettered
		}
		return nil // a fetch that failed is the requester's to report
	}
}

// resyncer is a source that can re-read everything on request.
type resyncer interface {
	Resync(ctx context.Context, sink source.Sink) error
}

// CountInterval is the shortest time between two writes of a type's count
// to its sync status by one replica.
const CountInterval = time.Second

// sink is the watcher's side of one source: it stores what the source
// reports, marks each type synced and keeps each type's count current.
type sink struct {
	env    svc.Env
	source string
	types  []string
	store  *store.Store
	stream jetstream.Stream // the resources bucket's stream
	status jetstream.KeyValue
	m      *metrics
	dirty  chan struct{} // a count may have changed since it was written

	// write serializes the writes of sync statuses, so a count and a
	// change of problems do not overwrite each other.
	write sync.Mutex

	mu      sync.Mutex
	synced  map[string]bool
	records map[string]msg.SyncStatus // by type, as last written
}

func newSink(env svc.Env, source string, types []string, st *store.Store, stream jetstream.Stream, status jetstream.KeyValue, m *metrics) *sink {
	return &sink{
		env: env, source: source, types: types, store: st, stream: stream, status: status, m: m,
		dirty: make(chan struct{}, 1), synced: map[string]bool{}, records: map[string]msg.SyncStatus{},
	}
}

func (k *sink) initial(typ string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.synced[typ]
}

// counted notes that the objects of typ may have changed: the gauge
// follows at once, the sync status within CountInterval.
func (k *sink) counted(typ string) {
	k.m.objects.WithLabelValues(k.source, typ).Set(float64(k.store.Count(typ)))
	k.markDirty()
}

func (k *sink) markDirty() {
	select {
	case k.dirty <- struct{}{}:
	default:
	}
}

// reportCounts writes the counts of synced types whose count changed,
// at most once per CountInterval, until ctx is done. A failed write is
// logged and tried again an interval later.
func (k *sink) reportCounts(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.dirty:
		}
		if err := k.writeCounts(ctx); err != nil && ctx.Err() == nil {
			log := k.env.Log.ErrorContext
			if passing(err) {
				log = k.env.Log.WarnContext // JetStream did not answer: the next try will do
			}
			log(ctx, "writing object counts to the sync status failed; trying again", "source", k.source, "err", err, "retry_in", CountInterval)
			k.markDirty()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(CountInterval):
		}
	}
}

// writeCounts rewrites the sync status of every synced type whose count
// differs from the one last written.
func (k *sink) writeCounts(ctx context.Context) error {
	k.write.Lock()
	defer k.write.Unlock()
	var errs []error
	for _, typ := range k.types {
		k.mu.Lock()
		st, ok := k.records[typ]
		k.mu.Unlock()
		n := k.store.Count(typ)
		if !ok || st.Count == n {
			continue // not synced yet (no marker before the first listing), or current
		}
		st.Count, st.At = n, time.Now().UTC()
		if err := k.putStatus(ctx, st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// putStatus writes st as the sync status of its type and remembers it.
func (k *sink) putStatus(ctx context.Context, st msg.SyncStatus) error {
	data, err := msg.Encode(st)
	if err != nil {
		return err
	}
	if _, err := k.status.Put(ctx, msg.SyncStatusKey(k.source, st.Type), data); err != nil {
		return fmt.Errorf("sync status %s %s: %w", k.source, st.Type, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.records[st.Type] = st
	return nil
}

// Replace stores a complete listing of one type.
func (k *sink) Replace(ctx context.Context, typ string, objects []store.Object) error {
	// One trace per listing: its writes, their change messages and every
	// render, validation and deploy they cause.
	ctx, span := k.env.Tracer.Tracer(Service).Start(ctx, "watcher apply "+k.source)
	defer span.End()
	start := time.Now()
	res, err := k.store.ApplyType(ctx, typ, objects, k.initial(typ))
	k.m.duration.WithLabelValues(k.source).Observe(time.Since(start).Seconds())
	k.m.applies.WithLabelValues(k.source, typ, "put").Add(float64(res.Put))
	k.m.applies.WithLabelValues(k.source, typ, "delete").Add(float64(res.Deleted))
	k.counted(typ)
	if err != nil {
		return fmt.Errorf("store %s %s: %w", k.source, typ, err)
	}
	if res.Put+res.Deleted > 0 {
		k.env.Log.InfoContext(ctx, "source applied", "source", k.source, "type", typ, "put", res.Put, "deleted", res.Deleted, "unchanged", res.Unchanged)
	}
	return nil
}

// ReplacePages stores a complete listing of types page by page: each page
// is written as it comes, and what no page held is deleted after the last.
// A listing that ends with an error deletes nothing.
func (k *sink) ReplacePages(ctx context.Context, types []string, pages iter.Seq2[[]store.Object, error]) error {
	ctx, span := k.env.Tracer.Tracer(Service).Start(ctx, "watcher apply "+k.source)
	defer span.End()
	start := time.Now()
	initial := slices.ContainsFunc(types, k.initial)
	l := k.store.BeginTypes(types, initial)
	counted := func() {
		for _, typ := range types {
			k.counted(typ)
		}
	}
	for page, err := range pages {
		if err != nil {
			counted()
			return err
		}
		_, _ = l.Put(ctx, page) // a failed write fails Finish too
		counted()
	}
	res, err := l.Finish(ctx)
	k.m.duration.WithLabelValues(k.source).Observe(time.Since(start).Seconds())
	counted()
	for _, typ := range types {
		k.m.applies.WithLabelValues(k.source, typ, "put").Add(float64(res.PutByType[typ]))
		k.m.applies.WithLabelValues(k.source, typ, "delete").Add(float64(res.DeletedByType[typ]))
	}
	if err != nil {
		return fmt.Errorf("store %s %s: %w", k.source, strings.Join(types, ", "), err)
	}
	if res.Put+res.Deleted > 0 {
		k.env.Log.InfoContext(ctx, "source applied", "source", k.source, "types", types, "put", res.Put, "deleted", res.Deleted, "unchanged", res.Unchanged)
	}
	return nil
}

// Upsert stores one object.
func (k *sink) Upsert(ctx context.Context, o store.Object) error {
	ctx, span := k.env.Tracer.Tracer(Service).Start(ctx, "watcher upsert "+k.source)
	defer span.End()
	start := time.Now()
	wrote, err := k.store.Upsert(ctx, o, k.initial(o.Type))
	k.m.duration.WithLabelValues(k.source).Observe(time.Since(start).Seconds())
	if wrote {
		k.m.applies.WithLabelValues(k.source, o.Type, "put").Inc()
	}
	k.counted(o.Type)
	return err
}

// UpsertAll stores many objects at once, their writes pipelined.
func (k *sink) UpsertAll(ctx context.Context, objects []store.Object) error {
	ctx, span := k.env.Tracer.Tracer(Service).Start(ctx, "watcher upsert "+k.source)
	defer span.End()
	byType := map[string][]store.Object{}
	for _, o := range objects {
		byType[o.Type] = append(byType[o.Type], o)
	}
	var errs []error
	for _, typ := range k.types {
		if len(byType[typ]) == 0 {
			continue
		}
		start := time.Now()
		res, err := k.store.UpsertAll(ctx, byType[typ], k.initial(typ))
		k.m.duration.WithLabelValues(k.source).Observe(time.Since(start).Seconds())
		k.m.applies.WithLabelValues(k.source, typ, "put").Add(float64(res.Put))
		k.counted(typ)
		if err != nil {
			errs = append(errs, fmt.Errorf("store %s %s: %w", k.source, typ, err))
		}
	}
	return errors.Join(errs...)
}

// Delete removes one object.
func (k *sink) Delete(ctx context.Context, typ, namespace, name string) error {
	ctx, span := k.env.Tracer.Tracer(Service).Start(ctx, "watcher delete "+k.source)
	defer span.End()
	start := time.Now()
	wrote, err := k.store.Remove(ctx, typ, namespace, name)
	k.m.duration.WithLabelValues(k.source).Observe(time.Since(start).Seconds())
	if wrote {
		k.m.applies.WithLabelValues(k.source, typ, "delete").Inc()
	}
	k.counted(typ)
	return err
}

// Problem reports passing trouble of the source. An error while ctx is
// done is the source being stopped (the process stopping), not trouble. A
// write to the bucket that JetStream did not answer, or that other
// replicas kept winning, is written again on the source's next pass: a
// warning; anything else (a source that cannot be read, a manifest that
// does not parse) is an error. Both count in the errors metric.
func (k *sink) Problem(ctx context.Context, err error) {
	if ctx.Err() != nil {
		k.env.Log.DebugContext(ctx, "source stopped", "source", k.source, "err", err)
		return
	}
	k.m.errors.WithLabelValues(k.source).Inc()
	if passing(err) {
		k.env.Log.WarnContext(ctx, "source write not stored; written again on the next pass", "source", k.source, "err", err)
		return
	}
	k.env.Log.ErrorContext(ctx, "source problem", "source", k.source, "err", err)
}

// passing reports a bucket write that asking again fixes.
func passing(err error) bool {
	return errors.Is(err, store.ErrContended) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
}

// Synced writes the sync status of typ: the first time (the initial sync,
// also announced on weft.sync.<source>.<type>) and whenever its problems
// change, so the status shows the current ones. The marker names the
// bucket revision a reader must have seen. Later count changes rewrite the
// status with the same revision (reportCounts).
func (k *sink) Synced(ctx context.Context, typ string, problems []string) error {
	k.write.Lock()
	defer k.write.Unlock()
	k.mu.Lock()
	first := !k.synced[typ]
	same := !first && slices.Equal(k.records[typ].Errors, problems)
	k.mu.Unlock()
	if same {
		return nil
	}
	info, err := k.stream.Info(ctx)
	if err != nil {
		return err
	}
	count := k.store.Count(typ)
	st := msg.SyncStatus{Source: k.source, Type: typ, Synced: true, Count: count, Revision: info.State.LastSeq, Errors: slices.Clone(problems), At: time.Now().UTC()}
	if err := k.putStatus(ctx, st); err != nil {
		return err
	}
	if first {
		s := msg.Sync{Source: k.source, Type: typ, Count: count, Revision: st.Revision, Errors: problems, At: st.At}
		if _, err := bus.Publish(ctx, k.env.JS, msg.SyncSubject(k.source, typ), "", s); err != nil {
			return err
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.synced[typ] = true
	if len(k.synced) == len(k.types) && first {
		k.env.Health.Set("watcher/"+k.source, nil)
		k.env.Log.InfoContext(ctx, "initial sync complete", "source", k.source)
		// The first listing passed through whole (every object decoded at
		// once); from now on only changes do. Hand that memory back to the
		// system now rather than over the next minutes.
		go debug.FreeOSMemory()
	}
	return nil
}

// onTrigger re-reads the whole source now.
func (k *sink) onTrigger(r resyncer) bus.CoreHandler {
	return func(ctx context.Context, m *nats.Msg) error {
		t, err := msg.DecodeTrigger(m.Data)
		if err != nil {
			return err
		}
		k.env.Log.InfoContext(ctx, "resync requested", "source", k.source, "reason", t.Reason)
		if err := r.Resync(ctx, k); err != nil {
			return fmt.Errorf("resync %s: %w", k.source, err)
		}
		if m.Reply != "" {
			_ = m.Respond([]byte("ok"))
		}
		return nil
	}
}
