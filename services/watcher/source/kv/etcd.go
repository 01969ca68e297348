package kv

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
)

// etcdPage is how many keys one Get of a full read returns at most.
const etcdPage = 1000

// etcdSource reads etcd v3.
type etcdSource struct {
	base
	endpoints  []string
	user, pass string
	// afterList, when set, runs after each full read reached the sink and
	// before the watch starts (tests use it to make the watch fall behind
	// a compaction).
	afterList func()
}

// etcdRange is one range a selector reads and watches: the key alone, or
// every key starting with it.
type etcdRange struct {
	key    string
	prefix bool
}

func newEtcd(b base, src config.Source, o options) (*etcdSource, error) {
	pass, err := endpointsAndPassword(src, o.environ)
	if err != nil {
		return nil, err
	}
	return &etcdSource{base: b, endpoints: src.Endpoints, user: src.Username, pass: pass}, nil
}

func (s *etcdSource) ranges() []etcdRange {
	var out []etcdRange
	for _, sel := range s.scope.selectors {
		if sel == "/" {
			return []etcdRange{{key: "/", prefix: true}}
		}
		out = append(out, etcdRange{key: sel}, etcdRange{key: sel + "/", prefix: true})
	}
	return out
}

// Run follows (or polls) etcd until ctx ends.
func (s *etcdSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	rep := newReporter(sink, s.typ)
	bo := backoff{cfg: s.bo}
	var client *clientv3.Client
	defer func() {
		if client != nil {
			_ = client.Close()
		}
	}()
	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	for {
		if client == nil {
			// With a password, creating the client already authenticates.
			client, err = clientv3.New(clientv3.Config{
				Endpoints:            s.endpoints,
				Username:             s.user,
				Password:             s.pass,
				DialTimeout:          s.timeout(),
				DialKeepAliveTime:    10 * time.Second,
				DialKeepAliveTimeout: 5 * time.Second,
				Logger:               zap.NewNop(),
				Context:              ctx,
				// Reconnect on the source's backoff rather than gRPC's,
				// which waits up to two minutes after an outage.
				DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
					Backoff: grpcbackoff.Config{
						BaseDelay:  s.bo.first,
						Multiplier: 2,
						Jitter:     0.2,
						MaxDelay:   s.bo.max,
					},
					MinConnectTimeout: 5 * time.Second,
				})},
			})
			if err != nil {
				client = nil
				if ctx.Err() != nil {
					return nil
				}
				sink.Problem(ctx, s.unavailable(err, "connect %s", strings.Join(s.endpoints, ",")))
				if pause.For(ctx, bo.next()) != nil {
					return nil
				}
				continue
			}
		}
		var rev int64
		if !listThenFollow(ctx, sink, &bo,
			func() (err error) { rev, err = s.list(ctx, client, rep); return err },
			func() error {
				if s.afterList != nil {
					s.afterList()
				}
				return s.between(ctx, tick.C, func() error { return s.follow(ctx, client, rep, rev, tick.C) })
			}) {
			return nil
		}
	}
}

// list reads every range at one revision and gives the listing to the
// sink; it returns that revision.
func (s *etcdSource) list(ctx context.Context, c *clientv3.Client, rep *reporter) (int64, error) {
	l := newListing(s.typ, 0)
	var rev int64
	for _, r := range s.ranges() {
		key, end := r.key, ""
		if r.prefix {
			end = clientv3.GetPrefixRangeEnd(r.key)
		}
		for {
			opts := []clientv3.OpOption{clientv3.WithLimit(etcdPage)}
			if end != "" {
				opts = append(opts, clientv3.WithRange(end))
			}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			gctx, cancel := context.WithTimeout(ctx, s.timeout())
			resp, err := c.Get(gctx, key, opts...)
			cancel()
			if err != nil {
				return 0, s.unavailable(err, "read %s", r.key)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			for _, kv := range resp.Kvs {
				k := string(kv.Key)
				if name, ok := s.scope.name(k); ok {
					l.add(name, entry{value: string(kv.Value), key: k})
				}
			}
			if !resp.More || len(resp.Kvs) == 0 || end == "" {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	if err := rep.replace(ctx, l); err != nil {
		return 0, err
	}
	return rev, nil
}

// follow watches every range from rev+1 until a full read is due (nil),
// ctx ends (nil) or the watch fails (an error). A compacted revision
// returns nil at once, so that everything is read again.
func (s *etcdSource) follow(ctx context.Context, c *clientv3.Client, rep *reporter, rev int64, tick <-chan time.Time) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	merged := make(chan clientv3.WatchResponse)
	for _, r := range s.ranges() {
		opts := []clientv3.OpOption{clientv3.WithRev(rev + 1)}
		if r.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		wg.Go(func() {
			// Watch waits until the server has created the watch: here,
			// so that a server lost meanwhile holds up neither the next
			// full read nor the report of the outage (cancelling wctx
			// ends the wait).
			for resp := range c.Watch(wctx, r.key, opts...) {
				select {
				case merged <- resp:
				case <-wctx.Done():
					return
				}
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			return nil
		case resp := <-merged:
			if resp.CompactRevision != 0 {
				return nil
			}
			if err := resp.Err(); err != nil {
				return s.unavailable(err, "watch")
			}
			if resp.Canceled {
				return s.unavailable(errors.New("watch cancelled"), "watch")
			}
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				var vals map[string]entry
				if ev.Type == clientv3.EventTypePut {
					if name, ok := s.scope.name(k); ok {
						vals = map[string]entry{name: {value: string(ev.Kv.Value), key: k}}
					}
				}
				if err := rep.setKey(ctx, k, vals); err != nil {
					return err
				}
			}
		}
	}
}
