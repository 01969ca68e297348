package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
)

var (
	// ErrConfig is wrapped by every error New returns for a source it
	// cannot build: an unknown type, a missing or invalid option.
	ErrConfig = errors.New("kv: invalid source configuration")
	// ErrUnavailable is wrapped by the problems a source reports when its
	// backend cannot be read for now: a server down, a bucket or file
	// missing, a password refused.
	ErrUnavailable = errors.New("kv: backend unavailable")
	// ErrInvalidData is wrapped by the problems a source reports about what
	// it read: a key with no name, two keys giving one name, a file that
	// does not parse.
	ErrInvalidData = errors.New("kv: invalid data")
	// ErrRunning is returned by Run when the source is already running.
	ErrRunning = errors.New("kv: source already running")
)

// DefaultNATSAddress is where a natskv source connects when src.Address is
// empty and no connection was given with WithNATSConn.
const DefaultNATSAddress = "nats://127.0.0.1:4222"

// Default backoff between attempts after a failure.
const (
	DefaultBackoffFirst = 250 * time.Millisecond
	DefaultBackoffMax   = 30 * time.Second
)

// Option adjusts a source built by New.
type Option func(*options) error

type options struct {
	nc           *nats.Conn
	environ      func() []string
	backoffFirst time.Duration
	backoffMax   time.Duration
}

// WithNATSConn makes a natskv source use nc instead of dialling src.Address
// (the all-in-one process shares its connection). The source never closes
// nc. Other backends ignore it.
func WithNATSConn(nc *nats.Conn) Option {
	return func(o *options) error {
		if nc == nil {
			return fmt.Errorf("%w: WithNATSConn: nil connection", ErrConfig)
		}
		o.nc = nc
		return nil
	}
}

// WithEnviron replaces os.Environ: environ returns the environment as
// "NAME=value" entries. An env source reads its variables from it, and
// every backend looks up the variable named by password_env in it.
func WithEnviron(environ func() []string) Option {
	return func(o *options) error {
		if environ == nil {
			return fmt.Errorf("%w: WithEnviron: nil function", ErrConfig)
		}
		o.environ = environ
		return nil
	}
}

// WithBackoff sets the wait before the first retry after a failure and the
// longest wait the doubling may reach (defaults DefaultBackoffFirst and
// DefaultBackoffMax). Each wait gets up to 20% of random jitter.
func WithBackoff(first, max time.Duration) Option {
	return func(o *options) error {
		if first <= 0 || max < first {
			return fmt.Errorf("%w: backoff %s..%s: want 0 < first <= max", ErrConfig, first, max)
		}
		o.backoffFirst, o.backoffMax = first, max
		return nil
	}
}

// New builds the source of src.Type (config.SourceNATSKV, SourceEnv,
// SourceFile, SourceEtcd, SourceRedis, SourceConsul or SourceZookeeper) and
// checks its options: the
// prefix and keys, and what the backend needs. Nothing is contacted before
// Run. Every error wraps ErrConfig.
func New(src config.Source, opts ...Option) (source.Source, error) {
	o := options{environ: os.Environ, backoffFirst: DefaultBackoffFirst, backoffMax: DefaultBackoffMax}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if src.Rescan < 0 {
		return nil, fmt.Errorf("%w: %s source %q: rescan must not be negative", ErrConfig, src.Type, src.Name)
	}
	sc, err := newScope(src.Prefix, src.Keys)
	if err != nil {
		return nil, fmt.Errorf("%s source %q: %w", src.Type, src.Name, err)
	}
	b := base{
		typ:     src.Type,
		scope:   sc,
		rescan:  src.Rescan.D(),
		poll:    src.Poll,
		bo:      backoffConfig{first: o.backoffFirst, max: o.backoffMax},
		running: new(atomic.Bool),
	}
	if b.rescan == 0 {
		b.rescan = config.DefaultRescan
	}
	var s source.Source
	switch src.Type {
	case config.SourceNATSKV:
		s, err = newNATS(b, src, o)
	case config.SourceEnv:
		s, err = newEnv(b, o)
	case config.SourceFile:
		s, err = newFile(b, src)
	case config.SourceEtcd:
		s, err = newEtcd(b, src, o)
	case config.SourceRedis:
		s, err = newRedis(b, src, o)
	case config.SourceConsul:
		s, err = newConsul(b, src, o)
	case config.SourceZookeeper:
		s, err = newZookeeper(b, src, o)
	default:
		err = fmt.Errorf("%w: type %q is not a key-value source (known: %s)", ErrConfig, src.Type,
			strings.Join([]string{config.SourceNATSKV, config.SourceEnv, config.SourceFile, config.SourceEtcd, config.SourceRedis, config.SourceConsul, config.SourceZookeeper}, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("%s source %q: %w", src.Type, src.Name, err)
	}
	return s, nil
}

// base is what every backend shares.
type base struct {
	typ    string
	scope  scope
	rescan time.Duration
	// poll: read everything every rescan and follow nothing in between.
	poll    bool
	bo      backoffConfig
	running *atomic.Bool
}

// start marks the source running; the returned func marks it stopped.
func (b *base) start() (func(), error) {
	if !b.running.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	return func() { b.running.Store(false) }, nil
}

// timeout bounds one request to the backend (one page of a full read):
// the rescan interval, kept within 1s..10s.
func (b *base) timeout() time.Duration {
	return min(max(b.rescan, time.Second), 10*time.Second)
}

// unavailable wraps a passing failure of the backend.
func (b *base) unavailable(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s: %w", b.typ, ErrUnavailable, fmt.Sprintf(format, args...), err)
}

// secret returns the secret called what (password, token) from the
// variable named by env or the file named by file (its content without
// the trailing line end), or "" when neither is named. Naming both, a
// variable that is unset or empty, and a file that cannot be read or is
// empty are errors; none of them shows the secret.
func secret(what, env, file string, environ func() []string) (string, error) {
	switch {
	case env != "" && file != "":
		return "", fmt.Errorf("%w: %s_env and %s_file exclude each other", ErrConfig, what, what)
	case env != "":
		v, ok := lookupEnv(environ(), env)
		if !ok || v == "" {
			return "", fmt.Errorf("%w: %s_env: the variable %s is not set", ErrConfig, what, env)
		}
		return v, nil
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: %s_file: %w", ErrConfig, what, err)
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%w: %s_file: %s is empty", ErrConfig, what, file)
		}
		return v, nil
	}
	return "", nil
}

func lookupEnv(environ []string, name string) (string, bool) {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

type backoffConfig struct{ first, max time.Duration }

// backoff is the wait between attempts after failures: first, then doubled
// up to max, each with up to 20% of jitter. reset starts again from first.
type backoff struct {
	cfg backoffConfig
	cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.cfg.first
	} else {
		b.cur = min(2*b.cur, b.cfg.max)
	}
	return b.cur + time.Duration(rand.Int64N(int64(b.cur)/5+1))
}

func (b *backoff) reset() { b.cur = 0 }

// listThenFollow is one turn of the loop of a source that lists, then
// follows changes from the listing: a failure of list or follow is
// reported to sink and waited out with bo, a list that succeeds resets
// bo. It reports whether the source goes on (ctx has not ended).
func listThenFollow(ctx context.Context, sink source.Sink, bo *backoff, list, follow func() error) bool {
	err := list()
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		sink.Problem(ctx, err)
		return pause.For(ctx, bo.next()) == nil
	}
	bo.reset()
	if err := follow(); err != nil && ctx.Err() == nil {
		sink.Problem(ctx, err)
		if pause.For(ctx, bo.next()) != nil {
			return false
		}
	}
	return ctx.Err() == nil
}

// between is what a source does from one full read until the next is
// due: follow the backend's changes, or, when it polls, only wait for
// tick (the next full read) or the end of ctx.
func (b *base) between(ctx context.Context, tick <-chan time.Time, follow func() error) error {
	if !b.poll {
		return follow()
	}
	nextRead(ctx, tick)
	return nil
}

// nextRead waits for tick (the next full read) or the end of ctx.
func nextRead(ctx context.Context, tick <-chan time.Time) {
	select {
	case <-ctx.Done():
	case <-tick:
	}
}

// endpointsAndPassword checks the endpoints of a source with a list of
// servers (etcd, zookeeper) and reads its password (password_env or
// password_file), which goes with its username.
func endpointsAndPassword(src config.Source, environ func() []string) (string, error) {
	if len(src.Endpoints) == 0 {
		return "", fmt.Errorf("%w: endpoints are required", ErrConfig)
	}
	for _, ep := range src.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return "", fmt.Errorf("%w: an endpoint is empty", ErrConfig)
		}
	}
	pass, err := secret("password", src.PasswordEnv, src.PasswordFile, environ)
	if err != nil {
		return "", err
	}
	if (src.Username == "") != (pass == "") {
		return "", fmt.Errorf("%w: username and password_env or password_file go together", ErrConfig)
	}
	return pass, nil
}
