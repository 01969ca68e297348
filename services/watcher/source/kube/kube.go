package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/connrotation"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/config/fieldpath"
	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// UserAgent is the user agent of the watcher's clients when their REST
// config names none.
const UserAgent = "weft-watcher"

// Defaults of Options.
const (
	DefaultFetchTTL = 30 * time.Second
	DefaultRetry    = 30 * time.Second
)

var (
	// ErrUnknownType is matched by errors.Is when Fetch is asked for a type
	// the source does not watch.
	ErrUnknownType = errors.New("kube: not a watched type")
	// ErrRunning is returned by Run when the source is already running.
	ErrRunning = errors.New("kube: source already running")
	// ErrNotRunning is returned by Resync when Run is not running.
	ErrNotRunning = errors.New("kube: source not running")
)

// Options configures a Source.
type Options struct {
	// Config reaches the API server (see kubeclient.RESTConfig). Required.
	Config *rest.Config
	// Types are the watched types by name.
	Types map[string]config.Resource
	// Strip are the fields removed from every object.
	Strip []fieldpath.Path
	// Resync is the period of the full re-list of every type; default
	// config.DefaultResync, negative disables it.
	Resync time.Duration
	// FetchTTL is how long Fetch keeps an object; default DefaultFetchTTL,
	// negative disables the cache.
	FetchTTL time.Duration
	// Retry is how often a kind the server does not serve is looked up
	// again; default DefaultRetry.
	Retry time.Duration
}

// Source watches a Kubernetes API server. Safe for concurrent use.
type Source struct {
	host     string
	dialer   *connrotation.Dialer
	dyn      dynamic.Interface
	mapper   *restmapper.DeferredDiscoveryRESTMapper
	types    []*watchedType // by name
	byName   map[string]*watchedType
	strip    []fieldpath.Path
	resync   time.Duration
	fetchTTL time.Duration
	retry    time.Duration

	runMu   sync.Mutex
	running chan struct{} // closed when the current Run ends; nil when not running

	fetchMu   sync.Mutex
	fetched   map[fetchKey]fetchedObject
	lastSweep time.Time
}

// watchedType is one configured type and what discovery said of it.
type watchedType struct {
	name     string
	res      config.Resource
	gvk      schema.GroupVersionKind
	onDemand bool
	dataKeys bool // a core Secret or ConfigMap: list its data keys
	secret   bool

	requests chan resyncRequest

	mu      sync.Mutex
	mapping *meta.RESTMapping // last known; nil until resolved
}

type resyncRequest struct {
	sink source.Sink
	done chan error
}

type fetchKey struct{ typ, namespace, name string }

type fetchedObject struct {
	body    map[string]any
	expires time.Time
}

// New checks the options and builds the clients; it does not contact the
// API server.
func New(o Options) (*Source, error) {
	if o.Config == nil {
		return nil, errors.New("kube: a REST config is required")
	}
	cfg, httpClient, dialer, err := kubeclient.OwnConnections(o.Config, UserAgent)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	s := &Source{
		host:     cfg.Host,
		dialer:   dialer,
		dyn:      dyn,
		mapper:   restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		byName:   map[string]*watchedType{},
		strip:    slices.Clone(o.Strip),
		resync:   o.Resync,
		fetchTTL: o.FetchTTL,
		retry:    o.Retry,
		fetched:  map[fetchKey]fetchedObject{},
	}
	if s.resync == 0 {
		s.resync = config.DefaultResync
	}
	if s.fetchTTL == 0 {
		s.fetchTTL = DefaultFetchTTL
	}
	if s.retry <= 0 {
		s.retry = DefaultRetry
	}
	var errs []error
	for _, name := range sortedKeys(o.Types) {
		t, err := newWatchedType(name, o.Types[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.types = append(s.types, t)
		s.byName[name] = t
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

func newWatchedType(name string, r config.Resource) (*watchedType, error) {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("kube: type %s: %s", name, fmt.Sprintf(f, args...))
	}
	if r.APIVersion == "" || r.Kind == "" {
		return nil, bad("api_version and kind are required")
	}
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return nil, bad("api_version %q: %v", r.APIVersion, err)
	}
	if _, err := labels.Parse(r.LabelSelector); err != nil {
		return nil, bad("label_selector %q: %v", r.LabelSelector, err)
	}
	if _, err := fields.ParseSelector(r.FieldSelector); err != nil {
		return nil, bad("field_selector %q: %v", r.FieldSelector, err)
	}
	switch r.Store {
	case "", config.StoreFull, config.StoreOnDemand:
	default:
		return nil, bad("store %q is neither %q nor %q", r.Store, config.StoreFull, config.StoreOnDemand)
	}
	core := gv.Group == "" && gv.Version == "v1"
	return &watchedType{
		name:     name,
		res:      r,
		gvk:      gv.WithKind(r.Kind),
		onDemand: r.Store == config.StoreOnDemand,
		dataKeys: core && (r.Kind == "Secret" || r.Kind == "ConfigMap"),
		secret:   core && r.Kind == "Secret",
		requests: make(chan resyncRequest),
	}, nil
}

// Run watches every type until ctx is done.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	s.runMu.Lock()
	if s.running != nil {
		s.runMu.Unlock()
		return ErrRunning
	}
	done := make(chan struct{})
	s.running = done
	s.runMu.Unlock()
	defer func() {
		s.runMu.Lock()
		s.running = nil
		s.runMu.Unlock()
		close(done)
		// Every type's goroutine has stopped: close the connections they leave.
		s.dialer.CloseAll()
	}()

	var wg sync.WaitGroup
	for _, t := range s.types {
		wg.Go(func() { s.watchType(ctx, t, sink) })
	}
	<-ctx.Done() // the types' goroutines end with ctx, too
	wg.Wait()
	return nil
}

// Resync lists every type from the API server now and reports each listing
// to sink with Replace. It waits for the types' goroutines, so it needs Run
// to be running.
func (s *Source) Resync(ctx context.Context, sink source.Sink) error {
	s.runMu.Lock()
	done := s.running
	s.runMu.Unlock()
	if done == nil {
		return ErrNotRunning
	}
	var errs []error
	for _, t := range s.types {
		req := resyncRequest{sink: sink, done: make(chan error, 1)}
		select {
		case t.requests <- req:
		case <-done:
			return ErrNotRunning
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-req.done:
			if err != nil {
				errs = append(errs, err)
			}
		case <-done:
			return ErrNotRunning
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// resolve maps the type's apiVersion and kind to a resource.
func (s *Source) resolve(ctx context.Context, t *watchedType) (*meta.RESTMapping, error) {
	m, err := s.mapper.RESTMappingWithContext(ctx, t.gvk.GroupKind(), t.gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, &UnknownKindError{Type: t.name, APIVersion: t.res.APIVersion, Kind: t.res.Kind, Err: err}
		}
		return nil, fmt.Errorf("kube: type %s: look up %s %s: %w", t.name, t.res.APIVersion, t.res.Kind, err)
	}
	t.mu.Lock()
	t.mapping = m
	t.mu.Unlock()
	return m, nil
}

// UnknownKindError is the problem of a type whose kind the API server does
// not serve.
type UnknownKindError struct {
	Type, APIVersion, Kind string
	Err                    error
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("type %s: the API server does not serve kind %s of %s (is its CustomResourceDefinition installed?); looking again periodically", e.Type, e.Kind, e.APIVersion)
}

func (e *UnknownKindError) Unwrap() error { return e.Err }

// resource is the dynamic client of the type's resource, scoped to its
// namespace when it has one.
func (s *Source) resource(t *watchedType, m *meta.RESTMapping) dynamic.ResourceInterface {
	if ns := t.namespace(m); ns != "" {
		return s.dyn.Resource(m.Resource).Namespace(ns)
	}
	return s.dyn.Resource(m.Resource)
}

// namespace is where the type is watched: its namespace for a namespaced
// kind, "" (everywhere) otherwise.
func (t *watchedType) namespace(m *meta.RESTMapping) string {
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return ""
	}
	return t.res.Namespace
}

// transform makes u what is reported: the strip fields removed
// and, for an on-demand type, the data left out. It changes u in place and
// may return a new object; applying it twice changes nothing more.
func (s *Source) transform(t *watchedType, u *unstructured.Unstructured) *unstructured.Unstructured {
	for _, p := range s.strip {
		p.Delete(u.Object)
	}
	if !t.onDemand {
		return u
	}
	return &unstructured.Unstructured{Object: t.metadataOnly(u.Object)}
}

// lastApplied copies the whole object into an annotation.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// metadataOnly is the on-demand view of obj.
func (t *watchedType) metadataOnly(obj map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		if v, ok := obj[k]; ok {
			out[k] = v
		}
	}
	if md, ok := out["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			if _, ok := ann[lastApplied]; ok {
				md = maps(md)
				ann = maps(ann)
				delete(ann, lastApplied)
				if len(ann) == 0 {
					delete(md, "annotations")
				} else {
					md["annotations"] = ann
				}
				out["metadata"] = md
			}
		}
	}
	if t.secret {
		if v, ok := obj["type"]; ok {
			out["type"] = v
		}
	}
	if t.dataKeys {
		_, hasData := obj["data"]
		_, hasBinary := obj["binaryData"]
		if prev, ok := obj["dataKeys"]; ok && !hasData && !hasBinary {
			out["dataKeys"] = prev // already transformed
			return out
		}
		var keys []string
		for _, f := range []string{"data", "binaryData"} {
			if m, ok := obj[f].(map[string]any); ok {
				for k := range m {
					keys = append(keys, k)
				}
			}
		}
		sort.Strings(keys)
		keys = slices.Compact(keys)
		list := make([]any, len(keys))
		for i, k := range keys {
			list[i] = k
		}
		out["dataKeys"] = list
	}
	return out
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// object is the store object of u (a transformed object, the caller's to
// give away): its content is not copied.
func (s *Source) object(t *watchedType, u *unstructured.Unstructured) store.Object {
	return store.Object{
		Type:            t.name,
		Namespace:       u.GetNamespace(),
		Name:            u.GetName(),
		ResourceVersion: u.GetResourceVersion(),
		Origin:          s.host,
		Body:            u.Object,
	}
}

// Fetch reads one object of a watched type in full from the API server,
// with the strip fields removed, and keeps it for the FetchTTL. The result
// is the caller's to keep. A missing object gives an error matched by
// k8s.io/apimachinery/pkg/api/errors.IsNotFound; a type that is not
// watched, one matched by ErrUnknownType. namespace is ignored for
// cluster-scoped kinds.
func (s *Source) Fetch(ctx context.Context, typ, namespace, name string) (map[string]any, error) {
	t := s.byName[typ]
	if t == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, typ)
	}
	key := fetchKey{typ, namespace, name}
	now := time.Now()
	if s.fetchTTL > 0 {
		s.fetchMu.Lock()
		if now.Sub(s.lastSweep) > s.fetchTTL {
			for k, f := range s.fetched {
				if now.After(f.expires) {
					delete(s.fetched, k)
				}
			}
			s.lastSweep = now
		}
		f, ok := s.fetched[key]
		s.fetchMu.Unlock()
		if ok && now.Before(f.expires) {
			return runtime.DeepCopyJSON(f.body), nil
		}
	}
	t.mu.Lock()
	m := t.mapping
	t.mu.Unlock()
	if m == nil {
		var err error
		if m, err = s.resolve(ctx, t); err != nil {
			return nil, fmt.Errorf("kube: fetch %s %s: %w", typ, objectName(namespace, name), err)
		}
	}
	var ri dynamic.ResourceInterface = s.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = s.dyn.Resource(m.Resource).Namespace(namespace)
	}
	u, err := ri.Get(ctx, name, getOptions)
	if err != nil {
		return nil, fmt.Errorf("kube: fetch %s %s: %w", typ, objectName(namespace, name), err)
	}
	for _, p := range s.strip {
		p.Delete(u.Object)
	}
	if s.fetchTTL > 0 {
		s.fetchMu.Lock()
		s.fetched[key] = fetchedObject{body: u.Object, expires: time.Now().Add(s.fetchTTL)}
		s.fetchMu.Unlock()
	}
	return runtime.DeepCopyJSON(u.Object), nil
}

func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// describe names a type for messages: "ingresses (networking.k8s.io/v1
// Ingress in shop, app=web)".
func (t *watchedType) describe() string {
	var parts []string
	parts = append(parts, t.res.APIVersion+" "+t.res.Kind)
	if t.res.Namespace != "" {
		parts = append(parts, "in "+t.res.Namespace)
	}
	if t.res.LabelSelector != "" {
		parts = append(parts, "labels "+t.res.LabelSelector)
	}
	if t.res.FieldSelector != "" {
		parts = append(parts, "fields "+t.res.FieldSelector)
	}
	return t.name + " (" + strings.Join(parts, ", ") + ")"
}
