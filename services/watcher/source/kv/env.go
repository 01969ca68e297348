package kv

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/weftio/weft/pkg/svc/pause"
	"github.com/weftio/weft/services/watcher/source"
)

// envSource reads environment variables.
type envSource struct {
	base
	env     envScope
	environ func() []string
}

func newEnv(b base, o options) (*envSource, error) {
	return &envSource{base: b, env: b.scope.env(), environ: o.environ}, nil
}

// read lists the selected variables, in name order so that collisions
// resolve the same way every time.
func (s *envSource) read() *listing {
	vars := s.environ()
	type variable struct{ key, name, value string }
	sel := make([]variable, 0, 16)
	for _, kv := range vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if name, ok := s.env.name(k); ok {
			sel = append(sel, variable{k, name, v})
		}
	}
	slices.SortFunc(sel, func(a, b variable) int { return strings.Compare(a.key, b.key) })
	l := newListing(s.typ, len(sel))
	for _, v := range sel {
		l.add(v.name, entry{value: v.value, key: v.key})
	}
	return l
}

// Run reads the environment now and every Rescan.
func (s *envSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	rep := newReporter(sink, s.typ)
	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	bo := backoff{cfg: s.bo}
	for {
		if err := rep.replace(ctx, s.read()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			sink.Problem(ctx, err)
			if pause.For(ctx, bo.next()) != nil {
				return nil
			}
			continue
		}
		bo.reset()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
