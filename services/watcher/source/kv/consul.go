package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptrace"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/services/watcher/source"
)

// DefaultConsulAddress is where a consul source connects when src.Address
// is empty: the local agent.
const DefaultConsulAddress = "127.0.0.1:8500"

// consulWait is how long one blocking query waits for a change (Consul
// caps it at 10 minutes and adds up to 1/16 of jitter).
const consulWait = 5 * time.Minute

// consulServiceOrigin marks the values of catalog services.
const consulServiceOrigin = "service"

// ConsulServiceName is the name of the value that holds the healthy
// instances of the Consul service called service.
func ConsulServiceName(service string) string { return "service:" + service }

// ConsulInstance is one healthy instance of a catalog service, as templates
// see it in the list that is the value ConsulServiceName(service).
type ConsulInstance struct {
	ID         string            `json:"id"`
	Service    string            `json:"service"`
	Node       string            `json:"node"`
	Datacenter string            `json:"datacenter"`
	Address    string            `json:"address"`
	Port       int               `json:"port"`
	Tags       []string          `json:"tags"`
	Meta       map[string]string `json:"meta"`
}

// consulSource reads Consul's KV store and, optionally, catalog services.
type consulSource struct {
	base
	address, datacenter, token string
	services                   []string
	// sent, when set, runs once the request of a blocking query (index
	// not 0) was written to the agent (tests use it to change the store
	// while the query waits).
	sent func(w consulWatch, index uint64)
}

func newConsul(b base, src config.Source, o options) (*consulSource, error) {
	addr := strings.TrimSpace(src.Address)
	if addr == "" {
		addr = DefaultConsulAddress
	}
	token, err := secret("token", src.TokenEnv, src.TokenFile, o.environ)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, s := range src.Services {
		if s == "" || strings.ContainsAny(s, "/?#") {
			return nil, fmt.Errorf("%w: services: not a service name: %q", ErrConfig, s)
		}
		if seen[s] {
			return nil, fmt.Errorf("%w: services: %q is named twice", ErrConfig, s)
		}
		seen[s] = true
	}
	s := &consulSource{base: b, address: addr, datacenter: src.Datacenter, token: token, services: slices.Sorted(slices.Values(src.Services))}
	_, tr, err := s.client()
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %w", ErrConfig, addr, err)
	}
	tr.CloseIdleConnections()
	return s, nil
}

// client returns a client of its own transport, which the caller closes
// with CloseIdleConnections when done.
func (s *consulSource) client() (*api.Client, *http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// One connection per blocking query stays open between answers.
	tr.MaxIdleConnsPerHost = len(s.scope.selectors) + len(s.services) + 1
	c, err := api.NewClient(&api.Config{Address: s.address, Datacenter: s.datacenter, Token: s.token, Transport: tr})
	return c, tr, err
}

// kvPrefix is the Consul key prefix that a selector reads: Consul keys
// have no leading slash.
func kvPrefix(sel string) string { return strings.TrimPrefix(sel, "/") }

// kvEntries are the values of the pairs that selector sel listed, by
// name. A listing by string prefix also returns keys of other selectors
// ("app" lists "apple/x"): only the keys sel selects are its own.
func (s *consulSource) kvEntries(sel string, pairs api.KVPairs) map[string]entry {
	out := make(map[string]entry, len(pairs))
	for _, p := range pairs {
		if e, name, ok := s.kvEntry(sel, p.Key, p.Value); ok {
			out[name] = e
		}
	}
	return out
}

// kvEntry maps one Consul key, when sel selects it. Keys ending in "/" are
// the folders the Consul UI creates; they hold no value.
func (s *consulSource) kvEntry(sel, key string, value []byte) (entry, string, bool) {
	if key == "" || strings.HasSuffix(key, "/") || !consulSelects(sel, key) {
		return entry{}, "", false
	}
	name, ok := s.scope.name(path.Join("/", key))
	if !ok {
		return entry{}, "", false
	}
	return entry{value: string(value), key: key}, name, true
}

// consulSelects reports whether selector sel selects the Consul key.
func consulSelects(sel, key string) bool { return under(path.Join("/", key), sel) }

// serviceEntry is the value of a service's healthy instances.
func serviceEntry(service string, hs []*api.ServiceEntry) (entry, error) {
	insts := make([]ConsulInstance, 0, len(hs))
	for _, h := range hs {
		if h.Service == nil || h.Node == nil {
			continue
		}
		addr := cmp.Or(h.Service.Address, h.Node.Address)
		tags := h.Service.Tags
		if tags == nil {
			tags = []string{}
		}
		meta := h.Service.Meta
		if meta == nil {
			meta = map[string]string{}
		}
		insts = append(insts, ConsulInstance{
			ID: h.Service.ID, Service: h.Service.Service, Node: h.Node.Node, Datacenter: h.Node.Datacenter,
			Address: addr, Port: h.Service.Port, Tags: tags, Meta: meta,
		})
	}
	slices.SortFunc(insts, func(a, b ConsulInstance) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
	})
	data, err := json.Marshal(insts)
	if err != nil {
		return entry{}, err
	}
	return entry{data: string(data), key: service, origin: consulServiceOrigin}, nil
}

// consulWatch is what one blocking query follows: a selector's keys, or
// a service.
type consulWatch struct {
	sel     string // the selector; "" for a service
	service string
}

func (w consulWatch) String() string {
	if w.service != "" {
		return "service " + w.service
	}
	return fmt.Sprintf("keys %q", kvPrefix(w.sel))
}

func (s *consulSource) watches() []consulWatch {
	var out []consulWatch
	for _, sel := range s.scope.selectors {
		out = append(out, consulWatch{sel: sel})
	}
	for _, svc := range s.services {
		out = append(out, consulWatch{service: svc})
	}
	return out
}

// consulResult is one answer of a watch: the values it gives now, by name.
type consulResult struct {
	watch int
	vals  map[string]entry
	err   error
}

// query reads watch w once, blocking while Consul's index is still index
// (0: answer at once).
func (s *consulSource) query(ctx context.Context, c *api.Client, w consulWatch, index uint64) (map[string]entry, uint64, error) {
	if s.sent != nil && index != 0 {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { s.sent(w, index) },
		})
	}
	// A blocking query answers within its wait plus Consul's jitter of up
	// to 1/16; an agent gone silent must not hold it longer.
	limit := s.timeout()
	if index != 0 {
		limit += consulWait + consulWait/16
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: consulWait}).WithContext(ctx)
	if w.service != "" {
		hs, meta, err := c.Health().Service(w.service, "", true, q)
		if err != nil {
			return nil, 0, s.unavailable(err, "read %s", w)
		}
		e, err := serviceEntry(w.service, hs)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: service %s: %w", s.typ, w.service, err)
		}
		return map[string]entry{ConsulServiceName(w.service): e}, meta.LastIndex, nil
	}
	pairs, meta, err := c.KV().List(kvPrefix(w.sel), q)
	if err != nil {
		return nil, 0, s.unavailable(err, "read %s", w)
	}
	return s.kvEntries(w.sel, pairs), meta.LastIndex, nil
}

// nextIndex is the index to wait from after an answer with index got, as
// Consul's documentation of blocking queries says: an index that went
// backwards (a restored snapshot, a new leader's state) starts over from
// 0, and an index of 0, which would make every query return at once, is
// taken as 1.
func nextIndex(prev, got uint64) uint64 {
	if got < prev {
		return 0
	}
	return max(got, 1)
}

// Run follows (or polls) Consul until ctx ends.
func (s *consulSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	c, tr, err := s.client()
	if err != nil {
		return fmt.Errorf("%s: %w: %w", s.typ, ErrConfig, err)
	}
	defer tr.CloseIdleConnections()
	rep := newReporter(sink, s.typ)
	bo := backoff{cfg: s.bo}
	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	for {
		var idx []uint64
		if !listThenFollow(ctx, sink, &bo,
			func() (err error) { idx, err = s.list(ctx, c, rep); return err },
			func() error {
				return s.between(ctx, tick.C, func() error { return s.follow(ctx, c, rep, idx, tick.C) })
			}) {
			return nil
		}
	}
}

// list reads every watch once and gives the listing to the sink; it
// returns each watch's index.
func (s *consulSource) list(ctx context.Context, c *api.Client, rep *reporter) ([]uint64, error) {
	ws := s.watches()
	l := newListing(s.typ, 0)
	idx := make([]uint64, len(ws))
	for i, w := range ws {
		vals, n, err := s.query(ctx, c, w, 0)
		if err != nil {
			return nil, err
		}
		for _, name := range slices.Sorted(maps.Keys(vals)) {
			l.add(name, vals[name])
		}
		idx[i] = nextIndex(0, n)
	}
	if err := rep.replace(ctx, l); err != nil {
		return nil, err
	}
	return idx, nil
}

// follow runs one blocking query per watch from the indexes of the last
// full read, and turns each answer into upserts and deletes, until a full
// read is due (nil), ctx ends (nil) or a query fails (an error).
func (s *consulSource) follow(ctx context.Context, c *api.Client, rep *reporter, idx []uint64, tick <-chan time.Time) error {
	ws := s.watches()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make(chan consulResult)
	for i, w := range ws {
		wg.Go(func() {
			index := idx[i]
			for {
				vals, n, err := s.query(wctx, c, w, index)
				if wctx.Err() != nil {
					return
				}
				if err == nil && n == index && index != 0 {
					continue // the wait ended with no change
				}
				select {
				case results <- consulResult{watch: i, vals: vals, err: err}:
				case <-wctx.Done():
					return
				}
				if err != nil {
					return
				}
				index = nextIndex(index, n)
			}
		})
	}
	// What each watch gave last, by name: a key is upserted when its value
	// changed and deleted when the watch no longer gives it.
	last := make([]map[string]entry, len(ws))
	for name, e := range rep.cur {
		for i, w := range ws {
			if consulGives(w, e) {
				if last[i] == nil {
					last[i] = map[string]entry{}
				}
				last[i][name] = e
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			return nil
		case r := <-results:
			if r.err != nil {
				return r.err
			}
			if err := s.apply(ctx, rep, last[r.watch], r.vals); err != nil {
				return err
			}
			last[r.watch] = r.vals
		}
	}
}

// consulGives reports whether watch w reads the key of e.
func consulGives(w consulWatch, e entry) bool {
	if w.service != "" || e.origin != "" {
		return e.origin == consulServiceOrigin && e.key == w.service
	}
	return consulSelects(w.sel, e.key)
}

// apply reports the difference between what a watch gave (old) and gives
// now (cur), key by key.
func (s *consulSource) apply(ctx context.Context, rep *reporter, old, cur map[string]entry) error {
	byRef := map[string]map[string]entry{}
	for name, e := range cur {
		if o, ok := old[name]; ok && o == e {
			continue
		}
		if byRef[e.ref()] == nil {
			byRef[e.ref()] = map[string]entry{}
		}
		byRef[e.ref()][name] = e
	}
	for name, e := range old {
		if _, ok := cur[name]; !ok && byRef[e.ref()] == nil {
			byRef[e.ref()] = map[string]entry{}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byRef)) {
		if err := rep.setRef(ctx, k, byRef[k]); err != nil {
			return err
		}
	}
	return nil
}
