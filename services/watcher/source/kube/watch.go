package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

var getOptions = metav1.GetOptions{}

// listPage is the page size of a full re-list.
const listPage = 500

// sinkRetry is how long a type waits before replacing its set again after
// the sink failed to take a change.
const sinkRetry = time.Second

// goneWait is how long a type whose resource went away waits before looking
// its kind up again.
const goneWait = time.Second

// watchType follows one type until ctx is done: it looks the kind up until
// the server serves it, then follows it with an informer until ctx is done
// or its resource goes away.
func (s *Source) watchType(ctx context.Context, t *watchedType, sink source.Sink) {
	r := reporter{sink: sink, t: t}
	var reportedUnknown bool // the type was reported empty and synced with its problem
	backoff := min(time.Second, s.retry)
	for {
		m, err := s.resolve(ctx, t)
		if err == nil {
			reportedUnknown = false
			backoff = min(time.Second, s.retry)
			if !s.follow(ctx, t, m, &r) {
				return
			}
			// The resource went away: look it up afresh once discovery
			// has caught up.
			select {
			case <-ctx.Done():
				return
			case <-time.After(goneWait):
			}
			s.mapper.Reset()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.problem(ctx, err)
		// An unknown kind is looked up every Retry; a failed look-up
		// (the server unreachable) is retried sooner, backing off to Retry.
		wait := s.retry
		var unknown *UnknownKindError
		if !errors.As(err, &unknown) {
			wait, backoff = backoff, min(2*backoff, s.retry)
		} else if !reportedUnknown {
			// A kind that is not served has no objects: report that, so
			// the rest of the configuration need not wait for it.
			problems := []string{unknown.Error()}
			if serr := sink.Replace(ctx, t.name, nil); serr != nil {
				r.problem(ctx, fmt.Errorf("type %s: %w", t.name, serr))
			} else if serr := sink.Synced(ctx, t.name, problems); serr != nil {
				r.problem(ctx, fmt.Errorf("type %s: %w", t.name, serr))
			} else {
				reportedUnknown = true
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case req := <-t.requests:
			timer.Stop()
			req.done <- nil // nothing to list; look the kind up again now
		}
		s.mapper.Reset()
	}
}

// follow runs an informer for the type. It returns false when ctx is done
// and true when the type's resource went away.
func (s *Source) follow(ctx context.Context, t *watchedType, m *meta.RESTMapping, r *reporter) bool {
	ns := t.namespace(m)
	if ns == "" && t.res.Namespace != "" {
		r.problem(ctx, fmt.Errorf("type %s: kind %s is cluster-scoped; namespace %q is ignored", t.name, t.res.Kind, t.res.Namespace))
	}
	ri := s.resource(t, m)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = t.res.LabelSelector, t.res.FieldSelector
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = t.res.LabelSelector, t.res.FieldSelector
			return ri.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(plainList{lw}, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{})
	q := &eventQueue{signal: make(chan struct{}, 1)}
	watchErrs := &errorBox{signal: make(chan struct{}, 1)}
	// These fail only on an informer that has started.
	_, herr := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { q.upsert(obj) },
		UpdateFunc: func(_, obj any) { q.upsert(obj) },
		DeleteFunc: q.delete,
	})
	if err := errors.Join(herr, inf.SetTransform(func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return s.transform(t, u), nil
		}
		return obj, nil
	}), inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !benignWatchError(err) {
			watchErrs.put(err)
		}
	})); err != nil {
		r.problem(ctx, fmt.Errorf("type %s: set up the informer: %w", t.name, err))
		<-ctx.Done()
		return false
	}

	ictx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		inf.RunWithContext(ictx)
	}()
	defer func() {
		stop()
		<-stopped
	}()

	synced := inf.HasSyncedChecker().Done()
	var hasSynced bool
	var syncedProblem string // what the type was marked synced with before it listed
	var resyncC <-chan time.Time
	if s.resync > 0 {
		ticker := time.NewTicker(s.resync)
		defer ticker.Stop()
		resyncC = ticker.C
	}
	retry := time.NewTimer(0)
	if !retry.Stop() {
		<-retry.C
	}
	defer retry.Stop()
	failed := func(err error) {
		r.problem(ctx, fmt.Errorf("type %s: %w; replacing its set again in %v", t.name, err, sinkRetry))
		retry.Reset(sinkRetry)
	}
	// replaceCached reports the informer's set. Events queued before are
	// already in that set and are dropped.
	replaceCached := func() {
		q.reset()
		items := inf.GetStore().List()
		objs := make([]store.Object, 0, len(items))
		for _, it := range items {
			if u, ok := it.(*unstructured.Unstructured); ok {
				objs = append(objs, s.object(t, u))
			}
		}
		if err := r.sink.Replace(ctx, t.name, objs); err != nil {
			failed(err)
			return
		}
		if err := r.sink.Synced(ctx, t.name, nil); err != nil {
			failed(err)
			return
		}
		r.clear()
	}
	// relist reports a listing straight from the API server.
	relist := func(sink source.Sink) (gone bool, err error) {
		objs, err := s.list(ctx, t, m)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			err = fmt.Errorf("type %s: list %s: %w", t.name, t.describe(), err)
			r.problem(ctx, err)
			return apierrors.IsNotFound(err), err
		}
		if err := sink.Replace(ctx, t.name, objs); err != nil {
			failed(err)
			return false, err
		}
		return false, nil
	}

	for {
		select {
		case <-ctx.Done():
			return false
		case <-synced:
			synced = nil
			hasSynced = true
			replaceCached()
		case <-q.signal:
			if !hasSynced {
				continue // the first Replace carries them
			}
			for _, e := range q.take() {
				if err := e.apply(ctx, s, t, r.sink); err != nil {
					failed(err)
				}
			}
		case <-watchErrs.signal:
			err := watchErrs.take()
			if err == nil {
				continue
			}
			if apierrors.IsNotFound(err) {
				r.problem(ctx, fmt.Errorf("type %s: %s %s is no longer served: %w", t.name, m.Resource.GroupVersion(), m.Resource.Resource, err))
				return true
			}
			err = fmt.Errorf("type %s: list and watch %s: %w", t.name, t.describe(), err)
			r.problem(ctx, err)
			if !hasSynced && settled(err) && err.Error() != syncedProblem {
				if serr := r.sink.Synced(ctx, t.name, []string{err.Error()}); serr != nil {
					r.problem(ctx, fmt.Errorf("type %s: %w", t.name, serr))
				} else {
					syncedProblem = err.Error()
				}
			}
		case <-resyncC:
			if !hasSynced {
				continue
			}
			if gone, _ := relist(r.sink); gone {
				return true
			}
		case req := <-t.requests:
			gone, err := relist(req.sink)
			req.done <- err
			if gone {
				return true
			}
		case <-retry.C:
			if hasSynced {
				replaceCached()
			}
		}
	}
}

// list reads the type's complete set from the API server, page by page.
func (s *Source) list(ctx context.Context, t *watchedType, m *meta.RESTMapping) ([]store.Object, error) {
	ri := s.resource(t, m)
	opts := metav1.ListOptions{LabelSelector: t.res.LabelSelector, FieldSelector: t.res.FieldSelector, Limit: listPage}
	var objs []store.Object
	for {
		l, err := ri.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			objs = append(objs, s.object(t, s.transform(t, &l.Items[i])))
		}
		if l.GetContinue() == "" {
			return objs, nil
		}
		opts.Continue = l.GetContinue()
	}
}

// settled reports whether err is one that retrying will not fix until a
// person changes something (permissions, credentials, the selectors).
func settled(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err)
}

// benignWatchError is what a reflector meets in normal operation: a watch
// that ended or a resource version that expired.
func benignWatchError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// plainList makes an informer list with plain LIST requests rather than a
// watch-list stream, which retries connection errors out of sight of the
// watch error handler (so they would never be reported) and sits out its
// backoff even after the informer is told to stop.
type plainList struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector not to use watch-list.
func (plainList) IsWatchListSemanticsUnSupported() bool { return true }

// reporter reports a type's problems, each distinct one once in a row.
type reporter struct {
	sink source.Sink
	t    *watchedType
	last string
}

func (r *reporter) problem(ctx context.Context, err error) {
	if err.Error() == r.last {
		return
	}
	r.last = err.Error()
	r.sink.Problem(ctx, err)
}

func (r *reporter) clear() { r.last = "" }

// event is one change the informer delivered.
type event struct {
	obj             *unstructured.Unstructured // nil for a delete
	namespace, name string
}

func (e event) apply(ctx context.Context, s *Source, t *watchedType, sink source.Sink) error {
	if e.obj == nil {
		return sink.Delete(ctx, t.name, e.namespace, e.name)
	}
	return sink.Upsert(ctx, s.object(t, e.obj))
}

// eventQueue holds the informer's events for the type's goroutine, without
// bound, so the informer never waits on the sink.
type eventQueue struct {
	mu     sync.Mutex
	events []event
	signal chan struct{}
}

func (q *eventQueue) push(e event) {
	q.mu.Lock()
	q.events = append(q.events, e)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *eventQueue) upsert(obj any) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		q.push(event{obj: u, namespace: u.GetNamespace(), name: u.GetName()})
	}
}

func (q *eventQueue) delete(obj any) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		q.push(event{namespace: o.GetNamespace(), name: o.GetName()})
	case cache.DeletedFinalStateUnknown:
		// Deleted while the watch was down: only the key is certain.
		ns, name, err := cache.SplitMetaNamespaceKey(o.Key)
		if err == nil {
			q.push(event{namespace: ns, name: name})
		}
	}
}

func (q *eventQueue) take() []event {
	q.mu.Lock()
	defer q.mu.Unlock()
	events := q.events
	q.events = nil
	return events
}

func (q *eventQueue) reset() { q.take() }

// errorBox keeps the latest watch error for the type's goroutine.
type errorBox struct {
	mu     sync.Mutex
	err    error
	signal chan struct{}
}

func (b *errorBox) put(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

func (b *errorBox) take() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.err
	b.err = nil
	return err
}
