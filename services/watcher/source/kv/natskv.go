package kv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
)

var validBucket = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// natsIdle is how long the initial values of a KV watcher may pause before
// the read is given up as stuck.
const natsIdle = 10 * time.Second

// natsSource reads a NATS KV bucket.
type natsSource struct {
	base
	bucket     string
	url        string
	user, pass string
	nc         *nats.Conn
	filters    []string
}

func newNATS(b base, src config.Source, o options) (*natsSource, error) {
	if src.Bucket == "" {
		return nil, fmt.Errorf("%w: bucket is required", ErrConfig)
	}
	if !validBucket.MatchString(src.Bucket) {
		return nil, fmt.Errorf("%w: bucket %q: only letters, digits, '-' and '_' are allowed", ErrConfig, src.Bucket)
	}
	s := &natsSource{base: b, bucket: src.Bucket, url: src.Address, nc: o.nc, filters: b.scope.kvFilters()}
	if s.url == "" {
		s.url = DefaultNATSAddress
	}
	for _, u := range strings.Split(s.url, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		if p, err := url.Parse(u); err != nil || p.Host == "" {
			return nil, fmt.Errorf("%w: address %q: want nats://host:port, several separated by commas", ErrConfig, src.Address)
		}
	}
	if s.nc == nil {
		pass, err := secret("password", src.PasswordEnv, src.PasswordFile, o.environ)
		if err != nil {
			return nil, err
		}
		if pass != "" && src.Username == "" {
			return nil, fmt.Errorf("%w: password_env is set but username is not", ErrConfig)
		}
		s.user, s.pass = src.Username, pass
	}
	return s, nil
}

// Run follows (or polls) the bucket until ctx ends.
func (s *natsSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	nc := s.nc
	if nc == nil {
		opts := []nats.Option{
			nats.Name("weft kv source " + s.bucket),
			nats.MaxReconnects(-1),
			nats.RetryOnFailedConnect(true),
			nats.ReconnectWait(time.Second),
			nats.NoCallbacksAfterClientClose(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				// A consumer goes quiet during an outage, which is
				// reported already.
				if !errors.Is(err, nats.ErrConsumerNotActive) {
					sink.Problem(ctx, s.unavailable(err, "connection"))
				}
			}),
		}
		if s.user != "" {
			opts = append(opts, nats.UserInfo(s.user, s.pass))
		}
		nc, err = nats.Connect(s.url, opts...)
		if err != nil {
			return fmt.Errorf("%s: connect %s: %w", s.typ, s.url, err)
		}
		defer nc.Close()
	}
	status := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CONNECTED)
	defer nc.RemoveStatusListener(status)
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("%s: %w", s.typ, err)
	}

	rep := newReporter(sink, s.typ)
	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	bo := backoff{cfg: s.bo}
	for {
		listed, err := s.session(ctx, js, rep, status, tick.C)
		if ctx.Err() != nil {
			return nil
		}
		if listed {
			bo.reset()
		}
		if err != nil {
			sink.Problem(ctx, err)
			if pause.For(ctx, bo.next()) != nil {
				return nil
			}
		} else if s.poll {
			// The session ended with its full read; the next is due at
			// the tick.
			nextRead(ctx, tick.C)
		}
	}
}

// session reads the bucket in full with a new watcher, then follows it
// (unless the source polls) until a full read is due (listed and a nil
// error), ctx ends or something fails. listed reports whether the full
// read reached the sink.
func (s *natsSource) session(ctx context.Context, js jetstream.JetStream, rep *reporter, status <-chan nats.Status, tick <-chan time.Time) (listed bool, err error) {
	// Statuses from before this session are answered by this full read.
	for len(status) > 0 {
		<-status
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout())
	kv, err := js.KeyValue(tctx, s.bucket)
	cancel()
	if err != nil {
		return false, s.unavailable(err, "bucket %s", s.bucket)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WatchFiltered rewrites the slice it is given.
	w, err := kv.WatchFiltered(wctx, slices.Clone(s.filters))
	if err != nil {
		return false, s.unavailable(err, "watch bucket %s", s.bucket)
	}
	defer msg.StopWatch(w)

	l := newListing(s.typ, 0)
	idle := time.NewTimer(natsIdle)
	defer idle.Stop()
initial:
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case e, ok := <-w.Updates():
			if !ok {
				return false, s.unavailable(errors.New("watcher closed"), "read bucket %s", s.bucket)
			}
			if e == nil {
				break initial
			}
			idle.Reset(natsIdle)
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			name, ok, err := s.name(e.Key())
			if err != nil {
				l.problem(err)
			} else if ok {
				l.add(name, entry{value: string(e.Value()), key: e.Key()})
			}
		case st := <-status:
			if st == nats.RECONNECTING || st == nats.DISCONNECTED {
				return false, s.unavailable(nats.ErrDisconnected, "read bucket %s", s.bucket)
			}
		case <-idle.C:
			return false, s.unavailable(errors.New("no progress"), "read bucket %s for %s", s.bucket, natsIdle)
		}
	}
	if err := rep.replace(ctx, l); err != nil {
		return false, err
	}
	if s.poll {
		return true, nil
	}
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case e, ok := <-w.Updates():
			if !ok {
				return true, s.unavailable(errors.New("watcher closed"), "follow bucket %s", s.bucket)
			}
			// The changes already waiting are stored together.
			rep.startBatch()
			for n := 0; ; n++ {
				if err := s.follow(ctx, rep, e); err != nil {
					return true, errors.Join(err, rep.flush(ctx))
				}
				if n == maxBatch {
					break
				}
				select {
				case e, ok = <-w.Updates():
					if !ok {
						return true, errors.Join(rep.flush(ctx), s.unavailable(errors.New("watcher closed"), "follow bucket %s", s.bucket))
					}
					continue
				default:
				}
				break
			}
			if err := rep.flush(ctx); err != nil {
				return true, err
			}
		case st := <-status:
			switch st {
			case nats.RECONNECTING, nats.DISCONNECTED:
				rep.sink.Problem(ctx, s.unavailable(nats.ErrDisconnected, "follow bucket %s", s.bucket))
			case nats.CONNECTED:
				// Back after an outage: read everything again.
				return true, nil
			}
		case <-tick:
			return true, nil
		}
	}
}

// maxBatch is the most waiting changes stored together.
const maxBatch = 1000

// follow reports one change of the bucket.
func (s *natsSource) follow(ctx context.Context, rep *reporter, e jetstream.KeyValueEntry) error {
	if e == nil {
		return nil
	}
	name, ok, err := s.name(e.Key())
	if err != nil {
		rep.sink.Problem(ctx, err)
		return nil
	}
	var vals map[string]entry
	if ok && e.Operation() == jetstream.KeyValuePut {
		vals = map[string]entry{name: {value: string(e.Value()), key: e.Key()}}
	}
	return rep.setKey(ctx, e.Key(), vals)
}

// name maps a KV key to its name; ok is false when the scope does not
// select it, and err says why a key cannot be mapped.
func (s *natsSource) name(key string) (name string, ok bool, err error) {
	p, err := kvPath(key)
	if err != nil {
		hint := ""
		if q, ok := keyAsPath(key); ok {
			hint = fmt.Sprintf(" (the path %s is the key %q)", q, kvKey(q))
		}
		return "", false, fmt.Errorf("%s: %w: bucket %s: key %q is not a path: %v%s", s.typ, ErrInvalidData, s.bucket, key, err, hint)
	}
	name, ok = s.scope.name(p)
	return name, ok, nil
}

// keyAsPath guesses the path a key that is not an encoding meant, for
// error messages: dots and slashes as separators, everything else literal.
func keyAsPath(key string) (string, bool) {
	p := "/" + strings.ReplaceAll(key, ".", "/")
	if p != path.Clean(p) {
		return "", false
	}
	return p, true
}
