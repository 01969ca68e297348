package kv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
)

const (
	// redisScanCount is the COUNT hint of each SCAN.
	redisScanCount = 1000
	// redisPing is how long the subscription may stay silent before it is
	// pinged; a ping unanswered for as long again means the connection is
	// dead.
	redisPing = 15 * time.Second
	// redisEvents is how many notified keys may wait; beyond that a full
	// read replaces them.
	redisEvents = 4096
	// redisNotifyFlags are the notify-keyspace-events flags the source
	// makes sure are set.
	redisNotifyFlags = "KEA"
)

// redisSource reads Redis.
type redisSource struct {
	base
	opts     *redis.Options
	channel  string // "__keyspace@<db>__:"
	patterns []string
}

func newRedis(b base, src config.Source, o options) (*redisSource, error) {
	if src.Address == "" {
		return nil, fmt.Errorf("%w: address is required", ErrConfig)
	}
	if src.Database < 0 {
		return nil, fmt.Errorf("%w: database %d is negative", ErrConfig, src.Database)
	}
	var opts *redis.Options
	if strings.Contains(src.Address, "://") {
		u, err := redis.ParseURL(src.Address)
		if err != nil {
			return nil, fmt.Errorf("%w: address: %v", ErrConfig, err)
		}
		opts = u
		if src.Database != 0 {
			opts.DB = src.Database
		}
	} else {
		if _, _, err := net.SplitHostPort(src.Address); err != nil {
			return nil, fmt.Errorf("%w: address %q: want host:port or a redis:// URL", ErrConfig, src.Address)
		}
		opts = &redis.Options{Addr: src.Address, DB: src.Database}
	}
	pass, err := secret("password", src.PasswordEnv, src.PasswordFile, o.environ)
	if err != nil {
		return nil, err
	}
	if src.Username != "" {
		opts.Username = src.Username
	}
	if pass != "" {
		opts.Password = pass
	}
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.DialTimeout = 5 * time.Second
	opts.PoolSize = 4
	opts.MaxRetries = 1
	s := &redisSource{base: b, opts: opts, channel: "__keyspace@" + strconv.Itoa(opts.DB) + "__:"}
	for _, sel := range b.scope.selectors {
		if sel == "/" {
			s.patterns = []string{s.channel + "/*"}
			break
		}
		s.patterns = append(s.patterns, s.channel+globEscape(sel), s.channel+globEscape(sel)+"/*")
	}
	return s, nil
}

// globEscape escapes the characters Redis glob patterns give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Run follows (or polls) Redis until ctx ends.
func (s *redisSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	client := redis.NewClient(s.opts)
	defer client.Close()
	rep := newReporter(sink, s.typ)

	events := make(chan string, redisEvents)
	resync := make(chan struct{}, 1)
	ready := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	if s.poll {
		close(ready)
	} else {
		wg.Go(func() { s.subscribe(sctx, client, sink, events, resync, ready) })
	}
	// The first full read starts once the subscription is in place (or
	// failed), so that no change falls between the two.
	select {
	case <-ctx.Done():
		return nil
	case <-ready:
	}

	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	bo := backoff{cfg: s.bo}
	var notifyProblem string
	full := true
	for {
		if full {
			err := s.list(ctx, client, rep, sink, &notifyProblem)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				sink.Problem(ctx, err)
				t := time.NewTimer(bo.next())
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				case <-resync:
					t.Stop()
				}
				continue
			}
			bo.reset()
			full = false
		}
		select {
		case <-ctx.Done():
			return nil
		case key := <-events:
			if err := s.readKey(ctx, client, rep, key); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				sink.Problem(ctx, err)
				full = true
			}
		case <-resync:
			full = true
		case <-tick.C:
			full = true
		}
	}
}

// list makes sure notifications are enabled (unless the source polls),
// reads every selected key and gives the listing to the sink.
func (s *redisSource) list(ctx context.Context, c *redis.Client, rep *reporter, sink source.Sink, notifyProblem *string) error {
	if !s.poll {
		if err := s.notifications(ctx, c, sink, notifyProblem); err != nil {
			return err
		}
	}
	l := newListing(s.typ, 0)
	add := func(key string, vals map[string]entry) {
		for name, e := range vals {
			l.add(name, e)
		}
	}
	// page reads one batch of keys, found with SCAN when match is set.
	page := func(cursor uint64, match string, keys []string) (uint64, error) {
		pctx, cancel := context.WithTimeout(ctx, s.timeout())
		defer cancel()
		var next uint64
		if match != "" {
			var err error
			if keys, next, err = c.Scan(pctx, cursor, match, redisScanCount).Result(); err != nil {
				return 0, s.unavailable(err, "scan %s", match)
			}
		}
		return next, s.read(pctx, c, keys, add)
	}
	for _, sel := range s.scope.selectors {
		match := "/*"
		if sel != "/" {
			if _, err := page(0, "", []string{sel}); err != nil {
				return err
			}
			match = globEscape(sel) + "/*"
		}
		var cursor uint64
		for {
			next, err := page(cursor, match, nil)
			if err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return rep.replace(ctx, l)
}

// notifications makes sure keyspace notifications are enabled, reporting
// (once) that they cannot be; a backend that cannot be read is an error.
func (s *redisSource) notifications(ctx context.Context, c *redis.Client, sink source.Sink, notifyProblem *string) error {
	nctx, cancel := context.WithTimeout(ctx, s.timeout())
	err := s.enableNotifications(nctx, c)
	cancel()
	if err != nil {
		if !replyError(err) {
			return s.unavailable(err, "read %s", s.opts.Addr)
		}
		// A refused password refuses everything: that is no problem of
		// notifications.
		pctx, cancel := context.WithTimeout(ctx, s.timeout())
		perr := c.Ping(pctx).Err()
		cancel()
		if perr != nil {
			return s.unavailable(perr, "connect %s", s.opts.Addr)
		}
		if text := err.Error(); text != *notifyProblem {
			*notifyProblem = text
			sink.Problem(ctx, s.unavailable(err, "keyspace notifications cannot be enabled; changes are read every %s", s.rescan))
		}
	} else {
		*notifyProblem = ""
	}
	return nil
}

// enableNotifications makes sure notify-keyspace-events has the flags
// the source needs, keeping those already set.
func (s *redisSource) enableNotifications(ctx context.Context, c *redis.Client) error {
	cur, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return err
	}
	flags := cur["notify-keyspace-events"]
	if strings.ContainsRune(flags, 'K') && strings.ContainsRune(flags, 'A') {
		return nil
	}
	want := flags
	for _, f := range redisNotifyFlags {
		if !strings.ContainsRune(want, f) {
			want += string(f)
		}
	}
	return c.ConfigSet(ctx, "notify-keyspace-events", want).Err()
}

// read reads keys with two pipelined round trips: GET for all, then
// HGETALL for those that are not strings. add receives each key's values
// by name (none for a key that is gone or of another type).
func (s *redisSource) read(ctx context.Context, c *redis.Client, keys []string, add func(key string, vals map[string]entry)) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := c.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
	}
	// Each command's own error is looked at below.
	_, _ = pipe.Exec(ctx)
	var others []string
	for i, g := range gets {
		k := keys[i]
		v, err := g.Result()
		switch {
		case err == nil:
			var vals map[string]entry
			if name, ok := s.scope.name(k); ok {
				vals = map[string]entry{name: {value: v, key: k}}
			}
			add(k, vals)
		case errors.Is(err, redis.Nil):
			add(k, nil)
		case replyError(err):
			others = append(others, k)
		default:
			return s.unavailable(err, "read %s", k)
		}
	}
	if len(others) == 0 {
		return nil
	}
	pipe = c.Pipeline()
	hashes := make([]*redis.MapStringStringCmd, len(others))
	for i, k := range others {
		hashes[i] = pipe.HGetAll(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	for i, h := range hashes {
		k := others[i]
		fields, err := h.Result()
		switch {
		case err == nil:
			vals := make(map[string]entry, len(fields))
			for f, v := range fields {
				if name, ok := s.scope.name(k + "/" + f); ok {
					if old, dup := vals[name]; dup && old.field < f {
						continue
					}
					vals[name] = entry{value: v, key: k, field: f}
				}
			}
			add(k, vals)
		case replyError(err):
			// A list, set or other type: nothing to read.
			add(k, nil)
		default:
			return s.unavailable(err, "read %s", k)
		}
	}
	return nil
}

// replyError reports whether err is an error reply of the server (such as
// WRONGTYPE), rather than a failure to talk to it.
func replyError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

// readKey reads one notified key again and updates its values.
func (s *redisSource) readKey(ctx context.Context, c *redis.Client, rep *reporter, key string) error {
	if _, ok := s.scope.name(key); !ok {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	var setErr error
	err := s.read(rctx, c, []string{key}, func(k string, vals map[string]entry) {
		setErr = rep.setKey(ctx, k, vals)
	})
	if err != nil {
		return err
	}
	return setErr
}

// subscribe keeps a keyspace subscription for the selectors, sending each
// notified key on events (or, when events is full, a signal on resync) and
// a resync signal after every re-established subscription. ready is closed
// once the first attempt is confirmed or failed. A refused subscription is
// reported and not tried again.
func (s *redisSource) subscribe(ctx context.Context, c *redis.Client, sink source.Sink, events chan<- string, resync chan<- struct{}, ready chan struct{}) {
	var once sync.Once
	markReady := func() { once.Do(func() { close(ready) }) }
	defer markReady()
	signal := func() {
		select {
		case resync <- struct{}{}:
		default:
		}
	}
	bo := backoff{cfg: s.bo}
	first := true
	for ctx.Err() == nil {
		confirmed, err := s.subscribeOnce(ctx, c, events, func() {
			if first {
				markReady()
			} else {
				signal()
			}
		}, signal)
		first = false
		markReady()
		if ctx.Err() != nil {
			return
		}
		if confirmed {
			bo.reset()
		}
		if refused(err) {
			sink.Problem(ctx, s.unavailable(err, "keyspace notifications refused; changes are read every %s", s.rescan))
			return
		}
		sink.Problem(ctx, s.unavailable(err, "keyspace subscription"))
		if pause.For(ctx, bo.next()) != nil {
			return
		}
	}
}

// refused reports whether a subscription error will not go away by itself.
func refused(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command")
}

// subscribeOnce subscribes and receives until the connection fails or ctx
// ends; onConfirmed runs once every pattern is confirmed.
func (s *redisSource) subscribeOnce(ctx context.Context, c *redis.Client, events chan<- string, onConfirmed, overflow func()) (confirmed bool, err error) {
	ps := c.PSubscribe(ctx, s.patterns...)
	defer ps.Close()
	// Closing the subscription is what interrupts a blocked receive.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	subscribed := 0
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, redisPing)
		if ctx.Err() != nil {
			return confirmed, nil
		}
		if err != nil {
			var ne net.Error
			if !confirmed || !errors.As(err, &ne) || !ne.Timeout() {
				return confirmed, err
			}
			if pinged {
				return confirmed, errors.New("no answer to ping")
			}
			if err := ps.Ping(ctx); err != nil {
				return confirmed, err
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if subscribed++; subscribed == len(s.patterns) {
				confirmed = true
				onConfirmed()
			}
		case *redis.Message:
			key, ok := strings.CutPrefix(m.Channel, s.channel)
			if !ok {
				continue
			}
			select {
			case events <- key:
			default:
				overflow()
			}
		}
	}
}
