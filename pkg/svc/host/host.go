// Package host runs weft services in a process: it reads the typed settings
// (flags over environment over defaults), connects to NATS (or starts an
// embedded server), provisions the streams and buckets, serves /healthz,
// /readyz and /metrics, and runs the given services until SIGINT/SIGTERM,
// then stops them and waits. Every binary's main calls Main.
package host

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/svc/health"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// Settings of a process. Flags override WEFT_* environment variables, which
// override the defaults.
type Settings struct {
	Config   string // WEFT_CONFIG: path of weft.yaml
	NATSURL  string // WEFT_NATS_URL: empty = embedded server
	Embedded string // WEFT_NATS_LISTEN: embedded server address (default 127.0.0.1:4222)
	DataDir  string // WEFT_DATA_DIR: embedded JetStream storage
	Listen   string // WEFT_LISTEN: health and metrics address
	LogLevel string // WEFT_LOG_LEVEL: debug, info, warn, error
	Replicas int    // WEFT_REPLICAS: JetStream replicas of streams and buckets
}

// Flags registers the settings on fs with their environment defaults.
func (s *Settings) Flags(fs *flag.FlagSet, embeddedDefault bool) {
	fs.StringVar(&s.Config, "config", env("WEFT_CONFIG", "weft.yaml"), "path of weft.yaml [WEFT_CONFIG]")
	natsDefault := "nats://127.0.0.1:4222"
	if embeddedDefault {
		natsDefault = ""
	}
	fs.StringVar(&s.NATSURL, "nats-url", env("WEFT_NATS_URL", natsDefault), "NATS server URL; empty starts an embedded server [WEFT_NATS_URL]")
	fs.StringVar(&s.Embedded, "nats-listen", env("WEFT_NATS_LISTEN", "127.0.0.1:4222"), "embedded NATS server address [WEFT_NATS_LISTEN]")
	fs.StringVar(&s.DataDir, "data-dir", env("WEFT_DATA_DIR", ""), "embedded JetStream storage (default: .weft next to the config) [WEFT_DATA_DIR]")
	fs.StringVar(&s.Listen, "listen", env("WEFT_LISTEN", "127.0.0.1:9090"), "address of /healthz, /readyz and /metrics [WEFT_LISTEN]")
	fs.StringVar(&s.LogLevel, "log-level", env("WEFT_LOG_LEVEL", "info"), "debug, info, warn or error [WEFT_LOG_LEVEL]")
	fs.IntVar(&s.Replicas, "replicas", envInt("WEFT_REPLICAS", 1), "JetStream replicas for streams and buckets [WEFT_REPLICAS]")
}

// RunFunc is a service's Run.
type RunFunc func(ctx context.Context, env svc.Env, cfg *config.Config) error

// Service names a RunFunc.
type Service struct {
	Name string
	Run  RunFunc
}

// Main parses args for a binary that runs services and runs them until a
// signal. It returns the first service error.
func Main(name string, args []string, embeddedDefault bool, services ...Service) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var s Settings
	s.Flags(fs, embeddedDefault)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, s, services...)
}

// Run runs services with settings s until ctx is done.
func Run(ctx context.Context, s Settings, services ...Service) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := telemetry.NewLogger(os.Stderr, level)
	cfg, err := config.Load(s.Config)
	if err != nil {
		return err
	}
	url := s.NATSURL
	if url == "" {
		ns, err := startEmbedded(s, cfg)
		if err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		url = ns.ClientURL()
		log.Info("embedded NATS server started", "url", url)
	}
	nc, err := nats.Connect(url, nats.Name("weft"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	if err != nil {
		return fmt.Errorf("connect %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = msg.Provision(pctx, js, s.Replicas)
	cancel()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tp := telemetry.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	checks := health.NewChecks()
	checks.Func("nats", func() error {
		if !nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	env := svc.Env{NC: nc, JS: js, Log: log, Registry: reg, Tracer: tp, Health: checks, Replica: svc.ReplicaName()}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return health.Serve(gctx, s.Listen, checks.Handler(reg), func(a net.Addr) {
			log.Info("serving /healthz, /readyz and /metrics", "addr", a.String())
		})
	})
	for _, sv := range services {
		g.Go(func() error {
			if err := sv.Run(gctx, env, cfg); err != nil {
				return fmt.Errorf("%s: %w", sv.Name, err)
			}
			return nil
		})
	}
	err = g.Wait()
	log.Info("stopped", "err", err)
	return err
}

func startEmbedded(s Settings, cfg *config.Config) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(s.Embedded)
	if err != nil {
		return nil, fmt.Errorf("nats-listen: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats-listen: %w", err)
	}
	if port == 0 {
		port = -1
	}
	dir := s.DataDir
	if dir == "" {
		dir = filepath.Join(cfg.Dir, ".weft")
	}
	return embedded.Start(embedded.Options{Host: host, Port: port, StoreDir: dir})
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}
