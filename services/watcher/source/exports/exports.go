// Package exports is the configmap-exports source (config-reader): it reads
// chosen keys of ConfigMaps in any namespace and reports each as a value
// (source.Value) that templates see as values.<name>, where name is the
// key's `as` or, without one, the key itself.
//
// # Contract
//
// Exactly the named ConfigMaps are watched, each by an informer on its own
// namespace restricted to its name by a field selector, so that a Role
// limited to those names (resourceNames) with get, list and watch is all the
// permission needed. Whenever a ConfigMap changes in a way that changes an
// exported value, every value is reported at once with
// Replace(config.ValuesType, values); a change to keys that are not exported
// reports nothing. Each value carries where it came from: "configmap"
// (namespace/name) and "key".
//
// Once every ConfigMap has been read once (found, found missing, or refused
// for want of permission) the source calls Synced(config.ValuesType,
// problems), and again whenever its problems change. A ConfigMap that does
// not exist, or lacks an exported key, is a problem whose message says so
// and lists the keys it has; the other values are still served, and the
// missing one is reported as soon as it appears. A ConfigMap that cannot be
// read (forbidden, for one) is a problem that is retried with backoff; the
// values last read from it, if any, stay. Every new problem is also
// reported with Problem, including those of a server that cannot be
// reached, which delays the first Synced rather than syncing half-read
// values.
//
// Every Options.Resync each ConfigMap is read again straight from the API
// server, the safety net against a missed event. Run returns nil once ctx is
// done, after every informer has stopped.
package exports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/connrotation"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/source/kube"
	"github.com/weftio/weft/services/watcher/store"
)

// Defaults of Options.
const (
	DefaultRetryMin = 500 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
)

// readTimeout bounds one direct read of a ConfigMap.
const readTimeout = 15 * time.Second

// sinkRetry is how long the source waits to report again after the sink
// failed.
const sinkRetry = time.Second

var (
	// ErrMissing is matched by errors.Is for a ConfigMap or key that does
	// not exist.
	ErrMissing = errors.New("exports: missing")
	// ErrRunning is returned by Run when the source is already running.
	ErrRunning = errors.New("exports: source already running")
	// ErrNotRunning is returned by Resync when Run is not running.
	ErrNotRunning = errors.New("exports: source not running")
)

// Options configures a Source.
type Options struct {
	// Config reaches the API server. Required.
	Config *rest.Config
	// Exports are the ConfigMaps and keys to export.
	Exports []config.Export
	// Resync is the period of the direct re-read of every ConfigMap;
	// default config.DefaultResync, negative disables it.
	Resync time.Duration
	// RetryMin and RetryMax bound the backoff of re-reading a ConfigMap
	// that could not be read; defaults DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
}

// Source reports exported ConfigMap keys as values.
type Source struct {
	dialer   *connrotation.Dialer
	client   kubernetes.Interface
	cms      []*configMap // by namespace/name
	resync   time.Duration
	retryMin time.Duration
	retryMax time.Duration

	runMu   sync.Mutex
	running chan resyncRequest // nil when not running
}

type resyncRequest struct {
	sink source.Sink
	done chan error
}

// configMap is one exported ConfigMap and what is known of it.
type configMap struct {
	namespace, name string
	keys            []config.ExportKey

	mu       sync.Mutex
	read     bool // read once: found, found missing, or failed
	exists   bool
	data     map[string]string
	binary   []string // binaryData keys
	err      error    // the last read failed
	changed  chan<- struct{}
	failures chan struct{} // a read failed: retry
}

// settled reports whether err is one that retrying will not fix until a
// person changes something.
func settled(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err)
}

// MissingError is the problem of a ConfigMap or key that does not exist.
type MissingError struct {
	ConfigMap string // namespace/name
	// Key is the missing key; empty when the ConfigMap itself is missing.
	Key string
	// Available are the ConfigMap's data keys, sorted.
	Available []string
	// Binary reports that Key exists, but in binaryData, which is not
	// exported.
	Binary bool
}

func (e *MissingError) Error() string {
	switch {
	case e.Key == "":
		return fmt.Sprintf("configmap %s not found", e.ConfigMap)
	case e.Binary:
		return fmt.Sprintf("configmap %s has key %q only in binaryData, which is not exported; data keys: %s", e.ConfigMap, e.Key, list(e.Available))
	default:
		return fmt.Sprintf("configmap %s has no key %q; available: %s", e.ConfigMap, e.Key, list(e.Available))
	}
}

// Is makes errors.Is(err, ErrMissing) true.
func (e *MissingError) Is(target error) bool { return target == ErrMissing }

func list(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// New checks the exports and builds the client; it does not contact the API
// server.
func New(o Options) (*Source, error) {
	if o.Config == nil {
		return nil, errors.New("exports: a REST config is required")
	}
	// Connections of its own, so that Run can close them all when it ends.
	cfg, httpClient, dialer, err := kubeclient.OwnConnections(o.Config, kube.UserAgent)
	if err != nil {
		return nil, fmt.Errorf("exports: %w", err)
	}
	client, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("exports: %w", err)
	}
	s := &Source{dialer: dialer, client: client, resync: o.Resync, retryMin: o.RetryMin, retryMax: o.RetryMax}
	if s.resync == 0 {
		s.resync = config.DefaultResync
	}
	if s.retryMin <= 0 {
		s.retryMin = DefaultRetryMin
	}
	if s.retryMax < s.retryMin {
		s.retryMax = max(DefaultRetryMax, s.retryMin)
	}
	if len(o.Exports) == 0 {
		return nil, errors.New("exports: nothing to export")
	}
	byName := map[string]*configMap{}
	names := map[string]string{}
	var errs []error
	for i, e := range o.Exports {
		ns, name, ok := strings.Cut(e.ConfigMap, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("exports[%d]: configmap must be <namespace>/<name>, got %q", i, e.ConfigMap))
			continue
		}
		cm := byName[e.ConfigMap]
		if cm == nil {
			cm = &configMap{namespace: ns, name: name}
			byName[e.ConfigMap] = cm
		}
		for _, k := range e.Keys {
			if k.Key == "" {
				errs = append(errs, fmt.Errorf("exports[%d]: a key without a name", i))
				continue
			}
			if other, dup := names[k.Name()]; dup {
				errs = append(errs, fmt.Errorf("exports[%d]: value %q is exported twice (also from %s)", i, k.Name(), other))
				continue
			}
			names[k.Name()] = e.ConfigMap
			cm.keys = append(cm.keys, k)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, id := range slices.Sorted(maps.Keys(byName)) {
		s.cms = append(s.cms, byName[id])
	}
	return s, nil
}

func (c *configMap) id() string { return c.namespace + "/" + c.name }

// observe records the ConfigMap as last seen (nil: it does not exist).
func (c *configMap) observe(cm *corev1.ConfigMap) {
	c.mu.Lock()
	c.observeLocked(cm)
	c.mu.Unlock()
	c.notify()
}

func (c *configMap) observeLocked(cm *corev1.ConfigMap) {
	c.read = true
	c.err = nil
	c.exists = cm != nil
	c.data, c.binary = nil, nil
	if cm != nil {
		c.data = maps.Clone(cm.Data)
		c.binary = slices.Sorted(maps.Keys(cm.BinaryData))
	}
}

// fail records a failed read; what was read before stays.
func (c *configMap) fail(err error) {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
	c.notify()
	c.retryLater()
}

// retryLater wakes the ConfigMap's retries.
func (c *configMap) retryLater() {
	select {
	case c.failures <- struct{}{}:
	default:
	}
}

// failLocked keeps the API server's own error. While the failure stays the
// same kind (forbidden, say) the first message is kept, so that a problem
// does not change text between a list and a get.
func (c *configMap) failLocked(err error) {
	// A failure that retrying alone will not fix (no permission, bad
	// credentials) completes the first read; one that passes (the server
	// unreachable) does not, so values are not synced half-read.
	c.read = c.read || settled(err)
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		err = status.(error)
	}
	if c.err != nil && apierrors.ReasonForError(c.err) == apierrors.ReasonForError(err) && apierrors.ReasonForError(err) != metav1.StatusReasonUnknown {
		return
	}
	c.err = err
}

func (c *configMap) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

func (c *configMap) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// values appends the ConfigMap's exported values and problems.
func (c *configMap) values(values []store.Object, problems []error) ([]store.Object, []error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		problems = append(problems, fmt.Errorf("configmap %s: cannot read it (retrying): %w", c.id(), c.err))
	}
	if !c.exists {
		if c.err == nil && c.read {
			problems = append(problems, &MissingError{ConfigMap: c.id()})
		}
		return values, problems, c.read
	}
	available := slices.Sorted(maps.Keys(c.data))
	for _, k := range c.keys {
		v, ok := c.data[k.Key]
		if !ok {
			_, binary := slices.BinarySearch(c.binary, k.Key)
			problems = append(problems, &MissingError{ConfigMap: c.id(), Key: k.Key, Available: available, Binary: binary})
			continue
		}
		values = append(values, source.Value(k.Name(), v, map[string]any{"configmap": c.id(), "key": k.Key}))
	}
	return values, problems, c.read
}

// Run watches the ConfigMaps until ctx is done.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	requests := make(chan resyncRequest)
	s.runMu.Lock()
	if s.running != nil {
		s.runMu.Unlock()
		return ErrRunning
	}
	s.running = requests
	s.runMu.Unlock()
	defer func() {
		s.runMu.Lock()
		s.running = nil
		s.runMu.Unlock()
		// Informers are stopped: close the connections they leave.
		s.dialer.CloseAll()
	}()

	changed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, c := range s.cms {
		c.mu.Lock()
		c.changed = changed
		c.failures = make(chan struct{}, 1)
		c.read, c.exists, c.err, c.data, c.binary = false, false, nil, nil, nil
		c.mu.Unlock()
		s.watch(ctx, &wg, c)
	}

	r := &reporter{sink: sink}
	var resyncC <-chan time.Time
	if s.resync > 0 {
		ticker := time.NewTicker(s.resync)
		defer ticker.Stop()
		resyncC = ticker.C
	}
	again := time.NewTimer(0)
	<-again.C
	defer again.Stop()
	report := func() {
		if !r.report(ctx, s.cms) {
			again.Reset(sinkRetry)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			report()
		case <-again.C:
			report()
		case <-resyncC:
			s.readAll(ctx)
			report()
		case req := <-requests:
			s.readAll(ctx)
			req.done <- (&reporter{sink: req.sink}).replace(ctx, s.cms)
		}
	}
}

// Resync reads every ConfigMap from the API server now and reports all
// values to sink with Replace.
func (s *Source) Resync(ctx context.Context, sink source.Sink) error {
	s.runMu.Lock()
	requests := s.running
	s.runMu.Unlock()
	if requests == nil {
		return ErrNotRunning
	}
	req := resyncRequest{sink: sink, done: make(chan error, 1)}
	select {
	case requests <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch starts the informer of one ConfigMap, and its retries of failed
// reads.
func (s *Source) watch(ctx context.Context, wg *sync.WaitGroup, c *configMap) {
	lw := cache.NewFilteredListWatchFromClient(s.client.CoreV1().RESTClient(), "configmaps", c.namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.name).String()
	})
	inf := cache.NewSharedIndexInformerWithOptions(plainList{lw}, &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{})
	// These fail only on an informer that has started.
	_, herr := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == c.name {
				c.observe(cm)
			}
		},
		UpdateFunc: func(_, obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == c.name {
				c.observe(cm)
			}
		},
		DeleteFunc: func(any) { c.observe(nil) },
	})
	werr := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		c.fail(err)
	})
	if err := errors.Join(herr, werr); err != nil {
		c.fail(err)
		return
	}
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-inf.HasSyncedChecker().Done():
		}
		// Listed: an empty cache means there is no such ConfigMap.
		if _, exists, _ := inf.GetStore().GetByKey(c.id()); !exists {
			c.observe(nil)
		} else {
			c.mu.Lock()
			c.err = nil
			c.mu.Unlock()
			c.notify()
		}
	})
	wg.Go(func() { s.retry(ctx, c) })
}

// plainList makes an informer list with plain LIST requests rather than a
// watch-list stream, which retries connection errors out of sight of the
// watch error handler (so they would never be reported) and sits out its
// backoff even after the informer is told to stop.
type plainList struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector not to use watch-list.
func (plainList) IsWatchListSemanticsUnSupported() bool { return true }

// retry re-reads a ConfigMap whose read failed, with exponential backoff,
// until a read succeeds (its informer retries too, on its own schedule).
func (s *Source) retry(ctx context.Context, c *configMap) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.failures:
		}
		for wait := s.retryMin; c.failed(); wait = min(2*wait, s.retryMax) {
			if pause.For(ctx, wait) != nil {
				return
			}
			s.read(ctx, c)
		}
	}
}

// readAll reads every ConfigMap straight from the API server.
func (s *Source) readAll(ctx context.Context) {
	for _, c := range s.cms {
		s.read(ctx, c)
	}
}

// read reads one ConfigMap straight from the API server. It holds the
// ConfigMap's lock while reading, so that an event the informer delivers
// meanwhile (newer than what is read) is recorded after it.
func (s *Source) read(ctx context.Context, c *configMap) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	c.mu.Lock()
	cm, err := s.client.CoreV1().ConfigMaps(c.namespace).Get(rctx, c.name, metav1.GetOptions{})
	switch {
	case ctx.Err() != nil:
		c.mu.Unlock()
		return
	case apierrors.IsNotFound(err):
		c.observeLocked(nil)
	case err != nil:
		c.failLocked(err)
	default:
		c.observeLocked(cm)
	}
	c.mu.Unlock()
	c.notify()
	if err != nil && !apierrors.IsNotFound(err) {
		c.retryLater()
	}
}

// reporter reports the values and problems as they change.
type reporter struct {
	sink     source.Sink
	synced   bool
	values   []store.Object // last replaced
	replaced bool
	problems []string // last synced
	reported map[string]bool
}

func (r *reporter) collect(cms []*configMap) ([]store.Object, []error, bool) {
	var values []store.Object
	var problems []error
	all := true
	for _, c := range cms {
		var read bool
		values, problems, read = c.values(values, problems)
		all = all && read
	}
	sort.Slice(values, func(i, j int) bool { return values[i].Name < values[j].Name })
	return values, problems, all
}

// replace reports every value now, whether or not it changed.
func (r *reporter) replace(ctx context.Context, cms []*configMap) error {
	values, _, _ := r.collect(cms)
	return r.sink.Replace(ctx, config.ValuesType, values)
}

// report reports what changed since the last report, once every
// ConfigMap has been read. It returns false when the sink failed.
func (r *reporter) report(ctx context.Context, cms []*configMap) bool {
	values, problems, all := r.collect(cms)
	if r.reported == nil {
		r.reported = map[string]bool{}
	}
	msgs := make([]string, len(problems))
	current := map[string]bool{}
	for i, p := range problems {
		msgs[i] = p.Error()
		current[msgs[i]] = true
		if !r.reported[msgs[i]] {
			r.sink.Problem(ctx, p)
		}
	}
	r.reported = current
	if !all {
		return true
	}
	if !r.replaced || !sameValues(values, r.values) {
		if err := r.sink.Replace(ctx, config.ValuesType, values); err != nil {
			r.sink.Problem(ctx, fmt.Errorf("exports: %w", err))
			r.replaced = false
			return false
		}
		r.values, r.replaced = values, true
	}
	if !r.synced || !slices.Equal(msgs, r.problems) {
		if err := r.sink.Synced(ctx, config.ValuesType, msgs); err != nil {
			r.sink.Problem(ctx, fmt.Errorf("exports: %w", err))
			return false
		}
		r.synced, r.problems = true, msgs
	}
	return true
}

func sameValues(a, b []store.Object) bool {
	return slices.EqualFunc(a, b, func(x, y store.Object) bool {
		return x.Name == y.Name && x.Body["value"] == y.Body["value"] &&
			x.Body["configmap"] == y.Body["configmap"] && x.Body["key"] == y.Body["key"]
	})
}
