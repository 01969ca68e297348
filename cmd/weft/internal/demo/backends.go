package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/weftio/weft/services/watcher/source/manifests"
)

// Echo serves HTTP on addr until the server is closed, answering every
// request with name and a newline.
func Echo(addr, name string) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo: echo backend %s on %s: %w", name, addr, err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name+"\n") }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// Endpoint is where an echo backend listens, and the name it answers.
type Endpoint struct {
	Addr string // ip:port
	Name string // the endpoint's targetRef name, or its address
}

// endpointSlice is the part of a discovery.k8s.io EndpointSlice the demo
// reads.
type endpointSlice struct {
	Ports []struct {
		Port int `json:"port"`
	} `json:"ports"`
	Endpoints []struct {
		Addresses []string `json:"addresses"`
		TargetRef struct {
			Name string `json:"name"`
		} `json:"targetRef"`
	} `json:"endpoints"`
}

// Endpoints lists every address and port that the EndpointSlices under
// dirs name, ready or not, sorted by address; an address named twice keeps
// its first name. Manifests that do not parse are skipped (the watcher
// reports them).
func Endpoints(dirs []string) ([]Endpoint, error) {
	seen := map[string]string{}
	for _, dir := range dirs {
		snap, err := manifests.Scan(dir)
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		for _, o := range snap.Objects {
			if o.Kind == "EndpointSlice" {
				if err := addEndpoints(seen, o.Body); err != nil {
					return nil, fmt.Errorf("demo: %s: %w", o, err)
				}
			}
		}
	}
	out := make([]Endpoint, 0, len(seen))
	for addr, name := range seen {
		out = append(out, Endpoint{Addr: addr, Name: name})
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return cmp.Compare(a.Addr, b.Addr) })
	return out, nil
}

func addEndpoints(seen map[string]string, body map[string]any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	var s endpointSlice
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	for _, p := range s.Ports {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				addr := net.JoinHostPort(a, strconv.Itoa(p.Port))
				if _, ok := seen[addr]; !ok {
					seen[addr] = cmp.Or(e.TargetRef.Name, a)
				}
			}
		}
	}
	return nil
}

// Backends keeps an echo backend on every Endpoint of the manifests.
type Backends struct {
	log     *slog.Logger
	dirs    []string
	mu      sync.Mutex
	running map[string]*echoServer // by address
	failed  map[Endpoint]bool      // reported once
}

type echoServer struct {
	name string
	srv  *http.Server
}

// followEvery is how often Follow reads the manifests again.
const followEvery = time.Second

// StartBackends starts an echo backend on every Endpoint of the manifests
// under dirs. An address that cannot be bound is logged, not fatal.
func StartBackends(log *slog.Logger, dirs []string) (*Backends, error) {
	b := &Backends{log: log, dirs: dirs, running: map[string]*echoServer{}, failed: map[Endpoint]bool{}}
	if err := b.Sync(); err != nil {
		return nil, err
	}
	return b, nil
}

// Sync starts and stops echo backends to match the manifests.
func (b *Backends) Sync() error {
	eps, err := Endpoints(b.dirs)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	want := map[string]string{}
	for _, e := range eps {
		want[e.Addr] = e.Name
	}
	for addr, e := range b.running {
		if want[addr] != e.name {
			_ = e.srv.Close()
			delete(b.running, addr)
			b.log.Info("echo backend stopped", "name", e.name, "addr", addr)
		}
	}
	for _, e := range eps {
		b.start(e)
	}
	return nil
}

func (b *Backends) start(e Endpoint) {
	if _, ok := b.running[e.Addr]; ok {
		return
	}
	srv, err := Echo(e.Addr, e.Name)
	if err != nil {
		if !b.failed[e] {
			b.failed[e] = true
			b.log.Warn("echo backend not started; requests routed there fail", "name", e.Name, "addr", e.Addr, "err", err)
		}
		return
	}
	delete(b.failed, e)
	b.running[e.Addr] = &echoServer{name: e.Name, srv: srv}
	b.log.Info("echo backend listening", "name", e.Name, "addr", e.Addr)
}

// Follow syncs every second until ctx is done. A sync that fails is
// logged and tried again; Follow returns nil.
func (b *Backends) Follow(ctx context.Context) error {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := b.Sync(); err != nil {
				b.log.Warn("echo backends not updated", "err", err)
			}
		}
	}
}

// Running returns the backends that listen, sorted by address.
func (b *Backends) Running() []Endpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Endpoint, 0, len(b.running))
	for addr, e := range b.running {
		out = append(out, Endpoint{Addr: addr, Name: e.name})
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return cmp.Compare(a.Addr, b.Addr) })
	return out
}

// Close stops every backend.
func (b *Backends) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for addr, e := range b.running {
		_ = e.srv.Close()
		delete(b.running, addr)
	}
}
