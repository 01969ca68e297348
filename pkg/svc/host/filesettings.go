package host

import (
	"context"
	"flag"
	"net"
	"net/http"
	"os"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/health"
)

// fileSettings are the flags a configuration file's controller and logging
// sections can set, with their environment variables.
var fileSettings = map[string]string{"listen": "WEFT_LISTEN", "log-level": "WEFT_LOG_LEVEL"}

// Given records which settings the command line or the environment gave
// (the flags set on fs, the WEFT_* variables set): the configuration
// file's controller and logging sections do not override those. Call it
// after fs is parsed.
func (s *Settings) Given(fs *flag.FlagSet) {
	s.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { s.given[f.Name] = true })
	for name, env := range fileSettings {
		if _, ok := os.LookupEnv(env); ok {
			s.given[name] = true
		}
	}
}

// applyFile applies cfg's logging.verbose and controller ports to the
// settings the command line and the environment did not give (flags over
// environment over file over defaults).
func (s *Settings) applyFile(cfg *config.Config) error {
	if cfg.Logging != nil && !s.given["log-level"] {
		s.LogLevel = strings.ToLower(cfg.Logging.Level().String())
	}
	if cfg.Controller != nil && !s.given["listen"] {
		healthz, metrics, err := cfg.ListenAddrs(s.Listen)
		if err != nil {
			return err
		}
		s.Listen = healthz
		if metrics != healthz {
			s.MetricsListen = metrics
		}
	}
	return nil
}

// serveSplit serves /healthz and /readyz on s.Listen and /metrics on
// s.MetricsListen.
func serveSplit(ctx context.Context, s Settings, env svc.Env, h http.Handler) error {
	g, ctx := errgroup.WithContext(ctx)
	serve := func(addr, what string, paths ...string) {
		g.Go(func() error {
			err := health.Serve(ctx, addr, only(h, paths...), func(a net.Addr) {
				env.Log.Info("serving "+what, "addr", a.String())
			})
			if err != nil {
				for _, a := range s.Addrs() {
					if a.Addr == addr {
						return a.IfTaken(err)
					}
				}
			}
			return err
		})
	}
	serve(s.Listen, "/healthz and /readyz", "/healthz", "/readyz")
	metrics := []string{"/metrics"}
	if s.Pprof {
		metrics = append(metrics, pprofPrefix)
	}
	serve(s.MetricsListen, "/metrics", metrics...)
	return g.Wait()
}

// only serves paths with h and answers 404 to every other; a path ending
// in "/" stands for every path under it.
func only(h http.Handler, paths ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range paths {
			if r.URL.Path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(r.URL.Path, p) {
				h.ServeHTTP(w, r)
				return
			}
		}
		http.NotFound(w, r)
	})
}
