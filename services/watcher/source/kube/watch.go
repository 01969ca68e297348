package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

var getOptions = metav1.GetOptions{}

// listPage is the page size of a listing.
const listPage = 500

// sinkRetry is how long a type waits before listing into the sink again
// after the sink failed to take a change.
const sinkRetry = time.Second

// goneWait is how long a type whose resource went away waits before looking
// its kind up again.
const goneWait = time.Second

// watchType follows one type until ctx is done: it looks the kind up until
// the server serves it, then lists and watches it until ctx is done or its
// resource goes away.
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

// follow lists the type and then watches it from the listing's resource
// version. It returns false when ctx is done and true when the type's
// resource went away. It caches no object: each page of a listing goes to
// the sink as it arrives (source.ReplacePages) and each watch event as it
// comes; the store keeps what it needs (key -> hash, revision). A watch
// that ends is taken up again from the last resource version seen, one
// whose version expired lists again; a listing the sink failed to take is
// listed again after sinkRetry; the periodic resync lists again while the
// watch goes on.
func (s *Source) follow(ctx context.Context, t *watchedType, m *meta.RESTMapping, r *reporter) bool {
	ns := t.namespace(m)
	if ns == "" && t.res.Namespace != "" {
		r.problem(ctx, fmt.Errorf("type %s: kind %s is cluster-scoped; namespace %q is ignored", t.name, t.res.Kind, t.res.Namespace))
	}
	f := &follower{s: s, t: t, m: m, ri: s.resource(t, m), r: r, backoff: min(time.Second, s.retry)}
	var resyncC <-chan time.Time
	if s.resync > 0 {
		ticker := time.NewTicker(s.resync)
		defer ticker.Stop()
		resyncC = ticker.C
	}
	f.retry = time.NewTimer(0)
	if !f.retry.Stop() {
		<-f.retry.C
	}
	defer f.retry.Stop()

	for {
		if f.rv == "" {
			switch f.listFirst(ctx) {
			case stepDone:
				return false
			case stepGone:
				return true
			case stepAgain:
				if !f.pause(ctx) {
					return false
				}
				continue
			}
		}
		w, err := f.ri.Watch(ctx, metav1.ListOptions{
			LabelSelector: t.res.LabelSelector, FieldSelector: t.res.FieldSelector,
			ResourceVersion: f.rv, AllowWatchBookmarks: true,
		})
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			if apierrors.IsNotFound(err) {
				r.problem(ctx, fmt.Errorf("type %s: %s %s is no longer served: %w", t.name, m.Resource.GroupVersion(), m.Resource.Resource, err))
				return true
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				f.rv = "" // list again
				continue
			}
			r.problem(ctx, fmt.Errorf("type %s: watch %s: %w", t.name, t.describe(), err))
			if !f.pause(ctx) {
				return false
			}
			continue
		}
		step := f.follow(ctx, w, resyncC)
		w.Stop()
		switch step {
		case stepDone:
			return false
		case stepGone:
			return true
		case stepAgain:
			if !f.pause(ctx) {
				return false
			}
		}
	}
}

// step is what follows a part of following a type.
type step int

const (
	stepOn    step = iota // go on (watch again from the last version seen)
	stepAgain             // failed: wait, then try again
	stepDone              // ctx is done
	stepGone              // the type's resource went away
)

// follower is the state of following one type.
type follower struct {
	s       *Source
	t       *watchedType
	m       *meta.RESTMapping
	ri      dynamic.ResourceInterface
	r       *reporter
	rv      string // the resource version to watch from; "" to list first
	synced  bool   // the first listing is stored and marked synced
	problem string // what the type was marked synced with before it listed
	backoff time.Duration
	retry   *time.Timer // a listing the sink failed to take is due again
}

// listFirst lists the type into the sink and marks it synced the first
// time; on success the watch goes on from the listing's version.
func (f *follower) listFirst(ctx context.Context) step {
	rv, err := f.list(ctx, f.r.sink)
	switch {
	case ctx.Err() != nil:
		return stepDone
	case err == nil:
	case apierrors.IsNotFound(err):
		return stepGone
	default:
		var lerr *listError
		if errors.As(err, &lerr) && !f.synced && settled(err) && err.Error() != f.problem {
			// Retrying will not fix it: say so in the sync status, so the
			// rest of the configuration need not wait for this type.
			if serr := f.r.sink.Synced(ctx, f.t.name, []string{err.Error()}); serr != nil {
				f.r.problem(ctx, fmt.Errorf("type %s: %w", f.t.name, serr))
			} else {
				f.problem = err.Error()
			}
		}
		return stepAgain
	}
	if !f.synced {
		if err := f.r.sink.Synced(ctx, f.t.name, nil); err != nil {
			f.failed(ctx, err)
			return stepAgain
		}
		f.synced = true
	}
	f.rv, f.backoff = rv, min(time.Second, f.s.retry)
	f.r.clear()
	return stepOn
}

// pause waits out the backoff (doubling it up to the Retry), serving
// resync requests meanwhile. It returns false when ctx is done.
func (f *follower) pause(ctx context.Context) bool {
	timer := time.NewTimer(f.backoff)
	defer timer.Stop()
	f.backoff = min(2*f.backoff, f.s.retry)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case req := <-f.t.requests:
			_, err := f.list(ctx, req.sink)
			req.done <- err
		}
	}
}

// follow takes in the events of w until it ends (stepOn: watch again), its
// version expired (list again), it failed (stepAgain: watch again after the
// backoff), ctx is done or the resource went away.
// Resyncs, requested or periodic, list meanwhile.
func (f *follower) follow(ctx context.Context, w watch.Interface, resyncC <-chan time.Time) step {
	for {
		select {
		case <-ctx.Done():
			return stepDone
		case e, ok := <-w.ResultChan():
			if !ok {
				return stepOn
			}
			if st, end := f.event(ctx, e); end {
				return st
			}
			f.backoff = min(time.Second, f.s.retry) // the watch works
		case <-resyncC:
			if _, err := f.list(ctx, f.r.sink); apierrors.IsNotFound(err) {
				return stepGone
			}
		case <-f.retry.C:
			_, err := f.list(ctx, f.r.sink)
			var lerr *listError
			switch {
			case apierrors.IsNotFound(err):
				return stepGone
			case errors.As(err, &lerr) && ctx.Err() == nil:
				f.retry.Reset(sinkRetry) // the sink still waits for a whole listing
			}
		case req := <-f.t.requests:
			_, err := f.list(ctx, req.sink)
			req.done <- err
			if apierrors.IsNotFound(err) {
				return stepGone
			}
		}
	}
}

// event takes in one watch event; end is set when the watch is to end with
// st.
func (f *follower) event(ctx context.Context, e watch.Event) (st step, end bool) {
	sink := f.r.sink
	switch e.Type {
	case watch.Added, watch.Modified:
		u, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return stepOn, false
		}
		f.rv = u.GetResourceVersion()
		if err := sink.Upsert(ctx, f.s.object(f.t, f.s.transform(f.t, u))); err != nil {
			f.failed(ctx, err)
		}
	case watch.Deleted:
		u, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return stepOn, false
		}
		f.rv = u.GetResourceVersion()
		if err := sink.Delete(ctx, f.t.name, u.GetNamespace(), u.GetName()); err != nil {
			f.failed(ctx, err)
		}
	case watch.Bookmark:
		if o, err := meta.Accessor(e.Object); err == nil {
			f.rv = o.GetResourceVersion()
		}
	case watch.Error:
		err := apierrors.FromObject(e.Object)
		switch {
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			f.rv = "" // list again
			return stepOn, true
		case apierrors.IsNotFound(err):
			f.r.problem(ctx, fmt.Errorf("type %s: %s %s is no longer served: %w", f.t.name, f.m.Resource.GroupVersion(), f.m.Resource.Resource, err))
			return stepGone, true
		}
		f.r.problem(ctx, fmt.Errorf("type %s: watch %s: %w", f.t.name, f.t.describe(), err))
		return stepAgain, true // watch again after the backoff
	}
	return stepOn, false
}

// failed reports that the sink did not take a change and lists the type
// into it again after sinkRetry.
func (f *follower) failed(ctx context.Context, err error) {
	f.r.problem(ctx, fmt.Errorf("type %s: %w; listing it again in %v", f.t.name, err, sinkRetry))
	f.retry.Reset(sinkRetry)
}

// listError is a listing that the API server refused or did not answer
// (rather than one the sink failed to take).
type listError struct{ err error }

func (e *listError) Error() string { return e.err.Error() }
func (e *listError) Unwrap() error { return e.err }

// list reports the type's complete set to sink page by page, and returns
// the listing's resource version. A failure is reported as a problem too.
func (f *follower) list(ctx context.Context, sink source.Sink) (string, error) {
	var rv string
	var lerr error
	pages := func(yield func([]store.Object, error) bool) {
		opts := metav1.ListOptions{LabelSelector: f.t.res.LabelSelector, FieldSelector: f.t.res.FieldSelector, Limit: listPage}
		for {
			l, err := f.ri.List(ctx, opts)
			if err != nil {
				lerr = &listError{fmt.Errorf("type %s: list %s: %w", f.t.name, f.t.describe(), err)}
				yield(nil, lerr)
				return
			}
			page := make([]store.Object, len(l.Items))
			for i := range l.Items {
				page[i] = f.s.object(f.t, f.s.transform(f.t, &l.Items[i]))
			}
			rv = l.GetResourceVersion()
			if !yield(page, nil) || l.GetContinue() == "" {
				return
			}
			opts.Continue = l.GetContinue()
		}
	}
	err := source.ReplacePages(ctx, sink, []string{f.t.name}, pages)
	switch {
	case err == nil:
		return rv, nil
	case ctx.Err() != nil:
		return "", err
	case lerr != nil:
		f.r.problem(ctx, lerr)
		return "", lerr
	}
	f.failed(ctx, err)
	return "", err
}

// settled reports whether err is one that retrying will not fix until a
// person changes something (permissions, credentials, the selectors).
func settled(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err)
}

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
