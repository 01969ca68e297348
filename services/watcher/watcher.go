// Package watcher turns sources of state into the resources bucket and
// change messages. Each configured source is watched on its own goroutine;
// every time a source's content may have changed, its complete set of
// objects is applied to the bucket (see package store), so a missed event is
// repaired by the next scan. After a source's first complete listing the
// watcher writes a sync marker per watched type (status bucket and
// weft.sync.<source>.<type>); nothing downstream renders before every marker
// is in. A manifest that stops parsing keeps its last good objects: the
// error is logged, counted and written to the sync status instead.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/services/watcher/relay"
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
			Name: "weft_watcher_changes_total", Help: "Objects written or deleted, by source and op.",
		}, []string{"source", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_watcher_source_errors_total", Help: "Source problems (unparseable manifests, store errors), by source.",
		}, []string{"source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_watcher_apply_duration_seconds", Help: "Time to apply one listing of a source.",
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
	kv, err := env.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		return fmt.Errorf("watcher: %w", err)
	}
	status, err := env.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return fmt.Errorf("watcher: %w", err)
	}
	cons, err := relay.Consumer(ctx, env.JS)
	if err != nil {
		return err
	}
	rl := relay.New(env.JS)
	opts := bus.Options{Service: Service, Log: env.Log, Tracer: env.Tracer.Tracer(Service), Metrics: bm, DLQ: env.JS}
	g, ctx := errgroup.WithContext(ctx)
	relayOpts := opts
	relayOpts.Stage = "relay"
	g.Go(func() error { return bus.Consume(ctx, cons, rl.Handle, relayOpts) })
	for _, src := range cfg.Sources {
		w, err := newSourceWatcher(ctx, env, cfg, src, kv, status, m)
		if err != nil {
			return err
		}
		env.Health.Pending("watcher/" + src.Name)
		g.Go(func() error { return w.run(ctx) })
		trig := opts
		trig.Stage = "trigger-resync"
		g.Go(func() error {
			return bus.Serve(ctx, env.NC, msg.TriggerResyncSubject(src.Name), "weft-watcher-"+src.Name, w.onTrigger, trig)
		})
	}
	return g.Wait()
}

type sourceWatcher struct {
	env    svc.Env
	src    config.Source
	cfg    *config.Config
	types  []string
	store  *store.Store
	stream jetstream.Stream // the resources bucket's stream
	status jetstream.KeyValue
	m      *metrics

	mu       sync.Mutex
	synced   bool
	lastGood map[string][]store.Object // by file: objects of the last good parse
}

func newSourceWatcher(ctx context.Context, env svc.Env, cfg *config.Config, src config.Source, kv, status jetstream.KeyValue, m *metrics) (*sourceWatcher, error) {
	w := &sourceWatcher{env: env, src: src, cfg: cfg, types: cfg.ResourceTypes(), status: status, m: m, lastGood: map[string][]store.Object{}}
	stream, err := env.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		return nil, fmt.Errorf("watcher: %w", err)
	}
	w.stream = stream
	st, err := store.New(src.Name, w.types, cfg.IgnorePaths(), kv, stream, env.JS)
	if err != nil {
		return nil, err
	}
	w.store = st
	return w, nil
}

func (w *sourceWatcher) run(ctx context.Context) error {
	mw, err := manifests.NewWatcher(w.src.Path, manifests.WithRescan(w.src.Rescan.D()))
	if err != nil {
		return fmt.Errorf("watcher %s: %w", w.src.Name, err)
	}
	return mw.Run(ctx, func(ctx context.Context, snap manifests.Snapshot) { w.apply(ctx, snap) })
}

// onTrigger re-reads the whole source now.
func (w *sourceWatcher) onTrigger(ctx context.Context, m *nats.Msg) error {
	t, err := msg.DecodeTrigger(m.Data)
	if err != nil {
		return err
	}
	w.env.Log.InfoContext(ctx, "resync requested", "source", w.src.Name, "reason", t.Reason)
	snap, err := manifests.Scan(w.src.Path)
	if err != nil {
		return fmt.Errorf("resync %s: %w", w.src.Name, err)
	}
	w.apply(ctx, snap)
	if m.Reply != "" {
		_ = m.Respond([]byte("ok"))
	}
	return nil
}

// apply writes one complete listing to the bucket. Errors are reported, not
// returned: the next listing tries again.
func (w *sourceWatcher) apply(ctx context.Context, snap manifests.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// One trace per listing: its writes, their change messages and every
	// render, validation and deploy they cause.
	ctx, span := w.env.Tracer.Tracer(Service).Start(ctx, "watcher apply "+w.src.Name)
	defer span.End()
	start := time.Now()
	broken := map[string]bool{}
	var problems []string
	for _, pe := range snap.Errors {
		broken[pe.File] = true
		problems = append(problems, pe.Error())
		w.env.Log.ErrorContext(ctx, "manifest not loaded; its last good objects stay", "source", w.src.Name, "file", pe.File, "doc", pe.Doc, "line", pe.Line, "err", pe.Err)
		w.m.errors.WithLabelValues(w.src.Name).Inc()
	}
	byFile := map[string][]store.Object{}
	for _, o := range snap.Objects {
		typ, ok := w.cfg.TypeFor(o.APIVersion, o.Kind)
		if !ok {
			continue
		}
		rv, _ := nested(o.Body, "metadata", "resourceVersion").(string)
		byFile[o.File] = append(byFile[o.File], store.Object{Type: typ, Namespace: o.Namespace, Name: o.Name, ResourceVersion: rv, Origin: o.File, Body: o.Body})
	}
	var objects []store.Object
	for file, objs := range byFile {
		if !broken[file] {
			w.lastGood[file] = objs
		}
	}
	for file := range w.lastGood {
		if _, ok := byFile[file]; !ok && !broken[file] {
			delete(w.lastGood, file) // the file is gone or holds nothing watched
		}
	}
	for _, objs := range w.lastGood {
		objects = append(objects, objs...)
	}
	res, err := w.store.Apply(ctx, dedupe(objects), !w.synced)
	w.m.duration.WithLabelValues(w.src.Name).Observe(time.Since(start).Seconds())
	w.m.applies.WithLabelValues(w.src.Name, "put").Add(float64(res.Put))
	w.m.applies.WithLabelValues(w.src.Name, "delete").Add(float64(res.Deleted))
	for t, n := range res.Counts {
		w.m.objects.WithLabelValues(w.src.Name, t).Set(float64(n))
	}
	if err != nil {
		w.m.errors.WithLabelValues(w.src.Name).Inc()
		w.env.Log.ErrorContext(ctx, "applying source failed; will retry on the next scan", "source", w.src.Name, "err", err)
		return
	}
	if res.Put+res.Deleted > 0 {
		w.env.Log.InfoContext(ctx, "source applied", "source", w.src.Name, "put", res.Put, "deleted", res.Deleted, "unchanged", res.Unchanged)
	}
	if err := w.markSynced(ctx, res, problems); err != nil {
		w.env.Log.ErrorContext(ctx, "writing sync status failed", "source", w.src.Name, "err", err)
	}
}

// markSynced writes the sync status per type: the first time (initial sync,
// also announced on weft.sync.<source>.<type>) and whenever the set of
// problems changes, so status shows the current manifest errors.
func (w *sourceWatcher) markSynced(ctx context.Context, res store.Result, problems []string) error {
	// Readers wait until they have seen the bucket up to this revision.
	info, err := w.stream.Info(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, typ := range w.types {
		key := msg.SyncStatusKey(w.src.Name, typ)
		if w.synced {
			var prev msg.SyncStatus
			if e, err := w.status.Get(ctx, key); err == nil && msg.Decode(e.Value(), &prev) == nil &&
				slices.Equal(prev.Errors, problems) && prev.Count == res.Counts[typ] {
				continue
			}
		}
		st := msg.SyncStatus{Source: w.src.Name, Type: typ, Synced: true, Count: res.Counts[typ], Revision: info.State.LastSeq, Errors: problems, At: time.Now().UTC()}
		data, err := msg.Encode(st)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := w.status.Put(ctx, key, data); err != nil {
			errs = append(errs, err)
			continue
		}
		if !w.synced {
			s := msg.Sync{Source: w.src.Name, Type: typ, Count: res.Counts[typ], Revision: st.Revision, Errors: problems, At: st.At}
			if _, err := bus.Publish(ctx, w.env.JS, msg.SyncSubject(w.src.Name, typ), "", s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !w.synced {
		w.synced = true
		w.env.Health.Set("watcher/"+w.src.Name, nil)
		w.env.Log.InfoContext(ctx, "initial sync complete", "source", w.src.Name, "counts", res.Counts)
	}
	return nil
}

// dedupe keeps the first object of each identity (a broken file's last good
// objects may have been moved to another file meanwhile).
func dedupe(objs []store.Object) []store.Object {
	slices.SortStableFunc(objs, func(a, b store.Object) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Origin, b.Origin)
	})
	return slices.CompactFunc(objs, func(a, b store.Object) bool {
		return a.Type == b.Type && a.Namespace == b.Namespace && a.Name == b.Name
	})
}

func nested(obj map[string]any, keys ...string) any {
	var cur any = obj
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}
