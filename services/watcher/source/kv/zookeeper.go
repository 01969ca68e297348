package kv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
)

// zkReserved is the subtree ZooKeeper keeps for itself; it is read only
// when a selector names it or a path below it.
const zkReserved = "/zookeeper"

// zkSessionTimeout is the session timeout the source asks for.
const zkSessionTimeout = 10 * time.Second

// zookeeperSource reads ZooKeeper znodes.
type zookeeperSource struct {
	base
	servers    []string
	user, pass string
}

func newZookeeper(b base, src config.Source, o options) (*zookeeperSource, error) {
	pass, err := endpointsAndPassword(src, o.environ)
	if err != nil {
		return nil, err
	}
	if strings.Contains(src.Username, ":") {
		return nil, fmt.Errorf("%w: a digest username cannot hold ':'", ErrConfig)
	}
	return &zookeeperSource{base: b, servers: src.Endpoints, user: src.Username, pass: pass}, nil
}

// zkEvents queues what the client's event callback gets, which must not
// block the client's receive loop.
type zkEvents struct {
	mu     sync.Mutex
	events []zk.Event
	notify chan struct{}
}

func (q *zkEvents) push(ev zk.Event) {
	q.mu.Lock()
	q.events = append(q.events, ev)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *zkEvents) take() []zk.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.events
	q.events = nil
	return evs
}

// zkNode is what the source knows of one znode.
type zkNode struct {
	data     string
	children map[string]bool
}

// zkTree follows the znodes under the selectors. Watches are one-shot: a
// watch the server fired (or dropped with the session) is armed again when
// its znode is read next, and never twice while it is armed, so that the
// client's list of watches does not grow with every full read. A source
// that polls reads without arming any watch.
type zkTree struct {
	s     *zookeeperSource
	conn  *zk.Conn
	nodes map[string]*zkNode
	// armed data (GetW, ExistsW) and child (ChildrenW) watches by path.
	data, child map[string]bool
	// emit reports the value of a path (nil: none).
	emit func(p string, value *string) error
}

// selectorRoot reports whether p is the znode of a selector.
func (t *zkTree) selectorRoot(p string) bool { return slices.Contains(t.s.scope.selectors, p) }

// skipped reports whether p is not read when walking from above it: the
// reserved subtree, unless a selector asks for it.
func (t *zkTree) skipped(p string) bool {
	if p != zkReserved {
		return false
	}
	for _, sel := range t.s.scope.selectors {
		if under(sel, zkReserved) {
			return false
		}
	}
	return true
}

// fired disarms the watches an event used up.
func (t *zkTree) fired(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeCreated, zk.EventNodeDataChanged:
		delete(t.data, ev.Path)
	case zk.EventNodeChildrenChanged:
		delete(t.child, ev.Path)
	case zk.EventNodeDeleted, zk.EventNotWatching:
		delete(t.data, ev.Path)
		delete(t.child, ev.Path)
	}
}

func (t *zkTree) get(p string) ([]byte, error) {
	if t.data[p] || t.s.poll {
		b, _, err := t.conn.Get(p)
		return b, err
	}
	b, _, _, err := t.conn.GetW(p)
	if err == nil {
		t.data[p] = true
	}
	return b, err
}

func (t *zkTree) children(p string) ([]string, error) {
	if t.child[p] || t.s.poll {
		c, _, err := t.conn.Children(p)
		return c, err
	}
	c, _, _, err := t.conn.ChildrenW(p)
	if err == nil {
		t.child[p] = true
	}
	return c, err
}

// refresh reads p and everything below it that is not known yet, arms the
// watches that are not armed, and emits what changed.
func (t *zkTree) refresh(p string) error {
	data, err := t.get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return t.gone(p)
	}
	if err != nil {
		return t.s.unavailable(err, "read %s", p)
	}
	kids, err := t.children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return t.gone(p)
	}
	if err != nil {
		return t.s.unavailable(err, "read the children of %s", p)
	}
	n := t.nodes[p]
	if n == nil {
		n = &zkNode{children: map[string]bool{}}
		t.nodes[p] = n
	}
	n.data = string(data)
	now := make(map[string]bool, len(kids))
	for _, k := range kids {
		c := path.Join(p, k)
		if !t.skipped(c) {
			now[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(n.children)) {
		if !now[k] {
			if err := t.remove(path.Join(p, k)); err != nil {
				return err
			}
		}
	}
	old := n.children
	n.children = now
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if !old[k] {
			if err := t.refresh(path.Join(p, k)); err != nil {
				return err
			}
		}
	}
	if len(now) > 0 {
		return t.emit(p, nil)
	}
	return t.emit(p, &n.data)
}

// gone forgets p, which does not exist, and watches for its creation when
// it is the znode of a selector (and the source follows changes).
func (t *zkTree) gone(p string) error {
	if err := t.remove(p); err != nil {
		return err
	}
	if !t.selectorRoot(p) || t.data[p] || t.s.poll {
		return nil
	}
	ok, _, _, err := t.conn.ExistsW(p)
	if err != nil {
		return t.s.unavailable(err, "watch %s", p)
	}
	t.data[p] = true
	if ok {
		// Created in the meantime.
		return t.refresh(p)
	}
	return nil
}

// remove forgets p and everything below it.
func (t *zkTree) remove(p string) error {
	n := t.nodes[p]
	if n == nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(n.children)) {
		if err := t.remove(path.Join(p, k)); err != nil {
			return err
		}
	}
	delete(t.nodes, p)
	return t.emit(p, nil)
}

// Run follows (or polls) ZooKeeper until ctx ends.
func (s *zookeeperSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	q := &zkEvents{notify: make(chan struct{}, 1)}
	conn, _, err := zk.Connect(s.servers, zkSessionTimeout,
		zk.WithLogger(zkNopLogger{}), zk.WithEventCallback(q.push))
	if err != nil {
		return fmt.Errorf("%s: %w: %w", s.typ, ErrConfig, err)
	}
	defer conn.Close()
	rep := newReporter(sink, s.typ)
	bo := backoff{cfg: s.bo}
	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	authed := s.user == ""
	t := &zkTree{s: s, conn: conn, data: map[string]bool{}, child: map[string]bool{}}
	for {
		if !authed {
			if err := conn.AddAuth("digest", []byte(s.user+":"+s.pass)); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				sink.Problem(ctx, s.unavailable(err, "authenticate as %s at %s", s.user, strings.Join(s.servers, ",")))
				if pause.For(ctx, bo.next()) != nil {
					return nil
				}
				continue
			}
			authed = true
		}
		// Events queued before the read are covered by it, except the
		// watches they disarmed.
		for _, ev := range q.take() {
			t.fired(ev)
		}
		if !listThenFollow(ctx, sink, &bo,
			func() error { return s.list(ctx, t, rep) },
			func() error {
				return s.between(ctx, tick.C, func() error { return s.follow(ctx, t, rep, q, tick.C) })
			}) {
			return nil
		}
	}
}

// list reads every selector's subtree afresh and gives the listing to the
// sink.
func (s *zookeeperSource) list(ctx context.Context, t *zkTree, rep *reporter) error {
	l := newListing(s.typ, 0)
	t.nodes = map[string]*zkNode{}
	t.emit = func(p string, value *string) error {
		name, ok := s.scope.name(p)
		switch {
		case !ok:
		case value == nil:
			// A znode that read as a leaf and then got children, or went.
			delete(l.vals, name)
		default:
			l.add(name, entry{value: *value, key: p})
		}
		return nil
	}
	for _, sel := range s.scope.selectors {
		if err := t.refresh(sel); err != nil {
			return err
		}
	}
	return rep.replace(ctx, l)
}

// follow handles watch events until a full read is due (nil), ctx ends
// (nil), or the connection is lost or a read fails (an error).
func (s *zookeeperSource) follow(ctx context.Context, t *zkTree, rep *reporter, q *zkEvents, tick <-chan time.Time) error {
	t.emit = func(p string, value *string) error {
		var vals map[string]entry
		if value != nil {
			if name, ok := s.scope.name(p); ok {
				vals = map[string]entry{name: {value: *value, key: p}}
			}
		}
		return rep.setKey(ctx, p, vals)
	}
	for {
		for _, ev := range q.take() {
			if ev.Type == zk.EventSession {
				switch ev.State {
				case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
					// Watches may be lost with the session: read
					// everything again once connected.
					return s.unavailable(errors.New(ev.State.String()), "connection to %s", strings.Join(s.servers, ","))
				}
				continue
			}
			t.fired(ev)
			if ev.Type == zk.EventNotWatching {
				return s.unavailable(cmpErr(ev.Err, errors.New("watch dropped")), "watch %s", ev.Path)
			}
			if !t.watched(ev.Path) {
				continue
			}
			if err := t.refresh(ev.Path); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			return nil
		case <-q.notify:
		}
	}
}

// watched reports whether p is a known znode or the znode of a selector.
func (t *zkTree) watched(p string) bool {
	_, ok := t.nodes[p]
	return ok || t.selectorRoot(p)
}

func cmpErr(err, or error) error {
	if err != nil {
		return err
	}
	return or
}

// zkNopLogger drops the client's own log lines: the source reports what
// matters as problems.
type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}
