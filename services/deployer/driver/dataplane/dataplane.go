package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors; every error returned by the package that falls in one of
// these classes wraps the sentinel.
var (
	// ErrBadPath: a bundle path is not a clean relative path, is given
	// twice, is both a file and a directory, or is neither the main
	// configuration nor a file directly inside MapsDir, CertsDir or
	// GeneralDir (the Dataplane API's storage is flat).
	ErrBadPath = errors.New("dataplane: bad path")
	// ErrConfig: the Options are invalid, or the bundle lacks the main
	// configuration file.
	ErrConfig = errors.New("dataplane: invalid options")
	// ErrUnreachable: the Dataplane API could not be reached, or answered
	// something that is not HTTP.
	ErrUnreachable = errors.New("dataplane: api unreachable")
	// ErrAPI: the Dataplane API refused a request (an answer the driver
	// does not expect, 401, 404, 5xx ...). The error text holds the method,
	// the path, the status and the API's message.
	ErrAPI = errors.New("dataplane: api error")
	// ErrVersionConflict: the configuration version changed between the
	// driver's read and its write (409) on every one of the
	// 1+MaxConflictRetries attempts: someone else keeps changing the
	// configuration.
	ErrVersionConflict = errors.New("dataplane: configuration version conflict")
	// ErrReloadFailed: HAProxy rejected the new configuration (the reload
	// the API reported ended "failed"). The previous worker keeps serving;
	// the next Apply sees the failed reload and reloads again.
	ErrReloadFailed = errors.New("dataplane: reload failed")
	// ErrRejected: the API checked the posted configuration (it runs
	// "haproxy -c" on every post, with or without a reload) and refused it
	// with a 400: nothing was stored or reloaded, HAProxy runs what it ran.
	// The API's answer (HAProxy's messages) is in the error and in
	// Result.ReloadDetail.
	ErrRejected = errors.New("dataplane: configuration rejected")
	// ErrReloadTimeout: the reload was still in progress after
	// ReloadTimeout.
	ErrReloadTimeout = errors.New("dataplane: reload timed out")
)

// Reload reasons, in Result.ReloadReason.
const (
	// ReasonStructure: haproxy.cfg changed in a way the runtime endpoints
	// cannot apply (anything but the address, port, weight and maintenance
	// state of existing servers).
	ReasonStructure = "structure"
	// ReasonFileChanged: a changed file HAProxy only reads when it loads
	// its configuration: a general file, a map or certificate HAProxy has
	// not loaded, or a map whose new content the runtime entries cannot
	// reproduce (duplicate keys, or an order that matters).
	ReasonFileChanged = "file-changed"
	// ReasonPending: the API's latest reload failed, so what HAProxy runs
	// is not the stored configuration.
	ReasonPending = "pending"
	// ReasonRuntimeFailed: a runtime endpoint refused a change; the bundle
	// was delivered by a reload instead.
	ReasonRuntimeFailed = "runtime-failed"
	// ReasonRuntimeDisabled: Options.DisableRuntime is set and the change
	// could have gone through the runtime endpoints.
	ReasonRuntimeDisabled = "runtime-disabled"
)

// Defaults for Options.
const (
	DefaultMain                             = "haproxy.cfg"
	DefaultMapsDir                          = "maps"
	DefaultCertsDir                         = "certs"
	DefaultGeneralDir                       = "files"
	DefaultRequestTimeout     time.Duration = 10 * time.Second
	DefaultReloadTimeout      time.Duration = 30 * time.Second
	DefaultPollInterval       time.Duration = 250 * time.Millisecond
	DefaultMaxConflictRetries               = 3
)

// File is one file of a bundle.
type File struct {
	// Path is relative to the target's base and slash-separated, e.g.
	// "maps/host.map".
	Path    string
	Content []byte
}

// Options configure a Driver.
type Options struct {
	// URL is the Dataplane API's address, e.g. "http://127.0.0.1:5555";
	// required. The driver adds "/v3/..." to it.
	URL string
	// User and Password are sent with HTTP basic authentication; User is
	// required.
	User, Password string
	// Main is the bundle path of the HAProxy configuration; default
	// "haproxy.cfg". Every bundle must contain it.
	Main string
	// MapsDir, CertsDir and GeneralDir are the bundle folders that hold the
	// files of the API's map storage, certificate storage and general
	// storage (defaults "maps", "certs" and "files"). They must differ.
	MapsDir, CertsDir, GeneralDir string
	// RequestTimeout bounds each request (default 10s).
	RequestTimeout time.Duration
	// ReloadTimeout bounds the wait for a reload to end (default 30s), and
	// PollInterval is the pause between two looks at it (default 250ms).
	ReloadTimeout, PollInterval time.Duration
	// MaxConflictRetries is how many times a version conflict (409) is
	// retried from a fresh read (default 3; a negative value means none).
	MaxConflictRetries int
	// DisableRuntime makes every change a reload.
	DisableRuntime bool
	// HTTPClient sends the requests (default: a client of its own).
	HTTPClient *http.Client
}

// Result describes what Apply did. On error it still describes what was done
// before the error.
type Result struct {
	// Written are the bundle paths written (new or changed content, in the
	// configuration or in storage), sorted.
	Written []string
	// Removed are the storage files removed because they left the bundle,
	// as bundle paths, sorted.
	Removed []string
	// Unchanged counts the bundle files that were already as wanted.
	Unchanged int
	// Reloaded reports a reload that HAProxy completed.
	Reloaded bool
	// ReloadReason is one of the Reason constants when a reload was needed
	// (also when it failed), and ReloadDetail says what caused it (and
	// HAProxy's answer when the reload failed).
	ReloadReason, ReloadDetail string
	// ReloadID is the id of the API's reload.
	ReloadID string
	// RuntimeOps are the runtime changes the API accepted, in order, e.g.
	// "set server be_app/SRV_1 addr 10.0.0.1 port 8080 weight 1 state
	// ready" or "add map maps/host.map a.example.com be_b".
	RuntimeOps []string
	// RuntimeError is the API's answer to the runtime change it refused,
	// when ReloadReason is ReasonRuntimeFailed.
	RuntimeError string
	// Conflicts counts the version conflicts that were retried.
	Conflicts int
	// Version is the configuration version after Apply.
	Version int64
}

// Driver delivers bundles to the HAProxy behind one Dataplane API. It is
// safe for concurrent use; calls of Apply are serialized.
type Driver struct {
	opts Options
	api  *client
	sem  chan struct{}
}

// New validates opts, fills in the defaults and returns a Driver.
func New(opts Options) (*Driver, error) {
	u, err := url.Parse(strings.TrimRight(opts.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: URL %q is not an http(s) address", ErrConfig, opts.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: URL %q has a query or fragment", ErrConfig, opts.URL)
	}
	opts.URL = u.String()
	if opts.User == "" {
		return nil, fmt.Errorf("%w: User is required", ErrConfig)
	}
	if err := opts.fillLayout(); err != nil {
		return nil, err
	}
	if err := opts.fillTimes(); err != nil {
		return nil, err
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Driver{
		opts: opts,
		api:  &client{base: opts.URL + "/v3", user: opts.User, password: opts.Password, http: hc, timeout: opts.RequestTimeout},
		sem:  make(chan struct{}, 1),
	}, nil
}

func (o *Options) fillLayout() error {
	if o.Main == "" {
		o.Main = DefaultMain
	}
	if reason := pathReason(o.Main); reason != "" || strings.Contains(o.Main, "/") {
		return fmt.Errorf("%w: Main %q must be a file name", ErrConfig, o.Main)
	}
	for _, d := range []struct {
		v   *string
		def string
	}{{&o.MapsDir, DefaultMapsDir}, {&o.CertsDir, DefaultCertsDir}, {&o.GeneralDir, DefaultGeneralDir}} {
		if *d.v == "" {
			*d.v = d.def
		}
		if pathReason(*d.v) != "" {
			return fmt.Errorf("%w: storage folder %q is not a clean relative path", ErrConfig, *d.v)
		}
	}
	if o.MapsDir == o.CertsDir || o.MapsDir == o.GeneralDir || o.CertsDir == o.GeneralDir {
		return fmt.Errorf("%w: MapsDir, CertsDir and GeneralDir must differ", ErrConfig)
	}
	return nil
}

func (o *Options) fillTimes() error {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.RequestTimeout, DefaultRequestTimeout}, {&o.ReloadTimeout, DefaultReloadTimeout}, {&o.PollInterval, DefaultPollInterval}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return fmt.Errorf("%w: negative duration %v", ErrConfig, *d.v)
		}
	}
	switch {
	case o.MaxConflictRetries == 0:
		o.MaxConflictRetries = DefaultMaxConflictRetries
	case o.MaxConflictRetries < 0:
		o.MaxConflictRetries = 0
	}
	return nil
}

// Options returns the options in effect, defaults filled in.
func (d *Driver) Options() Options { return d.opts }

// Refused reports whether err is an outcome to record rather than to retry:
// a bad bundle, or a configuration HAProxy rejected.
func Refused(err error) bool {
	return errors.Is(err, ErrReloadFailed) || errors.Is(err, ErrRejected) || errors.Is(err, ErrBadPath) || errors.Is(err, ErrConfig)
}

func (d *Driver) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case d.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Driver) unlock() { <-d.sem }
