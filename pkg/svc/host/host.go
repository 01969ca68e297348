// Package host runs weft services in a process: it reads the typed settings
// (flags over environment over the configuration's controller and logging
// sections over defaults), connects to NATS (or starts an
// embedded server), provisions the streams and buckets, serves /healthz,
// /readyz and /metrics, and runs the given services until SIGINT/SIGTERM,
// then stops them and waits. Every binary's main calls Main.
//
// The Go runtime's memory limit is set, once per process, to 90% of the
// memory limit of the process's cgroup (its container's), unless
// GOMEMLIMIT is set (applyMemoryLimit).
//
// A configuration file is followed: on SIGHUP, and when it changes on disk
// (unless --watch-config=false), it is read again, validated by the
// validator's template kind (liveconfig.FollowFile) and, when it passes,
// the services are restarted on it; otherwise the running configuration
// stays and an ERROR record says why. A configuration whose sites differ
// from those provisioned is provisioned again before the services restart
// on it. Addresses the process listens on are checked before anything
// starts (CheckAddrs), and so are the OpenTelemetry environment variables:
// each service gets a tracer provider of its own (telemetry.Tracing), whose
// spans are exported when those variables ask for it and flushed when the
// process stops.
//
// Started by systemd as Type=notify ($NOTIFY_SOCKET), the process says
// READY=1 once every target of its configuration is deployed, keeps a
// STATUS= line, pets the watchdog while its readiness checks pass and says
// STOPPING=1 at the end (package sdnotify). A binary may run a configuration
// it made (Binary.ConfigText, weft confd) instead of following a file.
//
// A binary with NoConfig (the puller's node agent) reads no configuration
// file and embeds no NATS server: it takes only the connection settings,
// and its services run once, with no configuration, until a signal.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/svc/envflag"
	"github.com/weftio/weft/pkg/svc/health"
	"github.com/weftio/weft/pkg/svc/liveconfig"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/svc/sdnotify"
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
	// BundleStoreMaxBytes (WEFT_BUNDLE_STORE_MAX_BYTES): the size cap of
	// the bundle store; 0: msg.DefaultBundleStoreMaxBytes.
	BundleStoreMaxBytes int64
	// ConfigMap ("<namespace>/<name>", WEFT_CONFIG_MAP) makes the
	// configuration come from that ConfigMap's key ConfigKey
	// (WEFT_CONFIG_KEY, default weft.yaml), validated before it goes live;
	// Kubeconfig (WEFT_KUBECONFIG) reaches the cluster (empty: in-cluster).
	ConfigMap  string
	ConfigKey  string
	Kubeconfig string
	// WatchConfig (WEFT_WATCH_CONFIG, default true): a change of the
	// configuration file on disk is validated and swapped in as on SIGHUP.
	WatchConfig bool
	// NATS: how the process proves who it is to NATS, and TLS.
	NATS natsauth.Client
	// SkipProvision (--provision=false, WEFT_PROVISION=false): do not
	// create or update the streams, buckets and stores at start. A
	// locked-down deployment runs `weft provision` once with the
	// provisioner's (or admin's) credentials and its services with
	// --provision=false, their users having no right to create anything.
	SkipProvision bool
	// EmbeddedConfig (WEFT_NATS_SERVER_CONFIG): a nats-server configuration
	// file whose accounts and users (weft nats-config) the embedded server
	// requires; its listen address and storage stay weft's.
	EmbeddedConfig string
	// Site (WEFT_SITE, --site on the binaries that serve a site) runs
	// the process at that site of weft.yaml's sites, on its leaf node:
	// provisioned to source from the hub, delivering the site's targets.
	Site string
	// MetricsListen, when set, serves /metrics apart from /healthz and
	// /readyz (Listen): the configuration's controller.metrics_port.
	MetricsListen string
	// Pprof (WEFT_PPROF) also serves Go's profiles under /debug/pprof/ on
	// the metrics address.
	Pprof bool

	// given: the settings the command line or environment gave (Given).
	given map[string]bool
}

// Flags registers the settings on fs with their environment defaults.
func (s *Settings) Flags(fs *flag.FlagSet, embeddedDefault bool) {
	natsDefault := "nats://127.0.0.1:4222"
	if embeddedDefault {
		natsDefault = ""
	}
	var env envflag.Defaults
	s.connectionFlags(fs, &env, natsDefault, "NATS server URL; empty starts an embedded server [WEFT_NATS_URL]")
	fs.StringVar(&s.Config, "config", env.String("WEFT_CONFIG", "weft.yaml"), "path of weft.yaml [WEFT_CONFIG]")
	fs.StringVar(&s.Embedded, "nats-listen", env.String("WEFT_NATS_LISTEN", "127.0.0.1:4222"), "embedded NATS server address [WEFT_NATS_LISTEN]")
	fs.StringVar(&s.DataDir, "data-dir", env.String("WEFT_DATA_DIR", ""), "embedded JetStream storage (default: .weft next to the config) [WEFT_DATA_DIR]")
	fs.StringVar(&s.ConfigMap, "config-map", env.String("WEFT_CONFIG_MAP", ""), "take the configuration from this ConfigMap (<namespace>/<name>), validated before it goes live [WEFT_CONFIG_MAP]")
	fs.StringVar(&s.ConfigKey, "config-key", env.String("WEFT_CONFIG_KEY", "weft.yaml"), "the ConfigMap key holding weft.yaml [WEFT_CONFIG_KEY]")
	fs.BoolVar(&s.WatchConfig, "watch-config", env.Bool("WEFT_WATCH_CONFIG", true), "validate and swap in the configuration file when it changes on disk, as on SIGHUP [WEFT_WATCH_CONFIG]")
	fs.StringVar(&s.EmbeddedConfig, "nats-server-config", env.String("WEFT_NATS_SERVER_CONFIG", ""), "nats-server configuration whose accounts and users (weft nats-config) the embedded server requires [WEFT_NATS_SERVER_CONFIG]")
	fs.StringVar(&s.Kubeconfig, "kubeconfig", env.String("WEFT_KUBECONFIG", ""), "kubeconfig for --config-map (empty: in-cluster or $KUBECONFIG) [WEFT_KUBECONFIG]")
}

// ConnectionFlags registers the settings of a binary that reads no
// weft.yaml and embeds no NATS server (Binary.NoConfig): --nats-url
// (default nats://127.0.0.1:4222), its credentials and TLS, --listen,
// --log-level, --replicas and --provision.
func (s *Settings) ConnectionFlags(fs *flag.FlagSet) {
	s.connectionFlags(fs, &envflag.Defaults{}, "nats://127.0.0.1:4222", "NATS server URL [WEFT_NATS_URL]")
}

func (s *Settings) connectionFlags(fs *flag.FlagSet, env *envflag.Defaults, natsDefault, natsUsage string) {
	fs.StringVar(&s.NATSURL, "nats-url", env.String("WEFT_NATS_URL", natsDefault), natsUsage)
	fs.StringVar(&s.Listen, "listen", env.String("WEFT_LISTEN", "127.0.0.1:9090"), "address of /healthz, /readyz and /metrics [WEFT_LISTEN]")
	fs.BoolVar(&s.Pprof, "pprof", env.Bool("WEFT_PPROF", false), "also serve Go's CPU, heap and goroutine profiles under /debug/pprof/ on the metrics address [WEFT_PPROF]")
	fs.StringVar(&s.LogLevel, "log-level", env.String("WEFT_LOG_LEVEL", "info"), "debug, info, warn or error [WEFT_LOG_LEVEL]")
	fs.IntVar(&s.Replicas, "replicas", env.Int("WEFT_REPLICAS", 1), "JetStream replicas for streams and buckets [WEFT_REPLICAS]")
	fs.Int64Var(&s.BundleStoreMaxBytes, "bundle-store-max-bytes", int64(env.Int("WEFT_BUNDLE_STORE_MAX_BYTES", int(msg.DefaultBundleStoreMaxBytes))), "size cap of the weft-bundles store; past it the oldest chunks go (kept bundles are stored again before) [WEFT_BUNDLE_STORE_MAX_BYTES]")
	s.NATS.Flags(fs)
	s.SkipProvision = !env.Bool("WEFT_PROVISION", true)
	fs.Var((*negated)(&s.SkipProvision), "provision", "create or update the streams, buckets and stores at start (false: `weft provision` made them) [WEFT_PROVISION]")
}

// SiteFlag registers --site [WEFT_SITE] on fs.
func (s *Settings) SiteFlag(fs *flag.FlagSet) {
	fs.StringVar(&s.Site, "site", (&envflag.Defaults{}).String("WEFT_SITE", ""), "run at this site of weft.yaml's sites, on the site's NATS leaf node: deliver only its targets (empty: the hub) [WEFT_SITE]")
}

// ConfigMapWatcher follows a ConfigMap key and proposes each new content
// (liveconfig.Propose). It is given by binaries that can reach Kubernetes.
type ConfigMapWatcher func(ctx context.Context, env svc.Env, s Settings) error

// RunFunc is a service's Run.
type RunFunc func(ctx context.Context, env svc.Env, cfg *config.Config) error

// Service names a RunFunc.
type Service struct {
	Name string
	Run  RunFunc
}

// Binary describes a program that runs services.
type Binary struct {
	Name            string
	EmbeddedDefault bool // no --nats-url: start an embedded server
	Services        []Service
	// ConfigMap follows --config-map; nil: the binary cannot take its
	// configuration from a ConfigMap itself (it can still run on one
	// another process activated, with --config-map).
	ConfigMap ConfigMapWatcher
	// Flags registers the binary's own flags, beside the common ones.
	Flags func(fs *flag.FlagSet)
	// Sites: the binary can run at a site (--site).
	Sites bool
	// Reload delivers the requests to read the configuration file again;
	// nil: Run listens for SIGHUP itself.
	Reload <-chan os.Signal
	// ConfigFile, if set, is the file followed for changes and ReadConfig
	// returns the configuration text to run from it (weft up --demo runs a
	// configuration derived from the file); nil: Settings.Config is both.
	ConfigFile string
	ReadConfig func() ([]byte, error)
	// NoConfig is a binary that reads no weft.yaml and embeds no NATS
	// server (the puller's node agent): Main registers only the
	// connection settings (Settings.ConnectionFlags), and Run connects,
	// provisions, serves /healthz, /readyz and /metrics and runs the
	// services once, with a nil configuration, until ctx is done or one
	// of them fails. It leaves SIGHUP alone.
	NoConfig bool
	// Connection names the NATS connection; empty: "weft".
	Connection string
	// ConfigText is a configuration the program made (weft confd), run in
	// place of Settings.Config's file and not followed; its relative
	// paths resolve against ConfigDir.
	ConfigText []byte
	ConfigDir  string
	// NoSystemd: the process does not speak systemd's notify protocol
	// (weft confd -onetime, a run that ends by itself).
	NoSystemd bool
	// Version is the program's version, the service.version of its spans;
	// empty: the main module's version from the build information.
	Version string
}

// Main parses args and runs the binary's services until a signal. It
// returns the first service error.
func Main(b Binary, args []string) error {
	fs := flag.NewFlagSet(b.Name, flag.ContinueOnError)
	var s Settings
	if b.NoConfig {
		s.ConnectionFlags(fs)
	} else {
		s.Flags(fs, b.EmbeddedDefault)
	}
	if b.Sites {
		s.SiteFlag(fs)
	}
	if b.Flags != nil {
		b.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	s.Given(fs)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, s, b)
}

// Run runs the binary's services with settings s until ctx is done. With a
// ConfigMap the services start once a configuration is active and restart
// on every newly activated one.
func Run(ctx context.Context, s Settings, b Binary) error {
	var fileCfg *config.Config
	var fileData []byte
	if !b.NoConfig && s.ConfigMap == "" {
		var cfg *config.Config
		var err error
		if b.ConfigText != nil {
			fileData = b.ConfigText
			cfg, err = config.ParseFile(b.Name, b.ConfigText, b.ConfigDir)
		} else {
			// Read first: a change after it is seen as a change.
			fileData, _ = os.ReadFile(s.Config)
			cfg, err = config.Load(s.Config)
		}
		if err != nil {
			return err
		}
		if err := s.applyFile(cfg); err != nil {
			return err
		}
		fileCfg = cfg
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := telemetry.NewLogger(os.Stderr, level)
	log.Debug("settings", "log_level", s.LogLevel, "listen", s.Listen, "metrics_listen", s.MetricsListen)
	applyMemoryLimit(log)
	tracing, err := startTracing(ctx, b, log)
	if err != nil {
		return err
	}
	defer stopTracing(tracing, log)
	b.Services = traced(b.Services, tracing)
	if b.NoConfig {
		return runWithoutConfig(ctx, s, b, tracing, log)
	}
	var fileHash string
	dir, _ := os.Getwd()
	if fileCfg != nil {
		fileHash, dir = liveconfig.Hash(string(fileData)), fileCfg.Dir
		if err := fileCfg.CheckSite(s.Site); err != nil {
			return err
		}
		for _, note := range fileCfg.SeedNotes() {
			log.Warn(note)
		}
	} else if s.Site != "" {
		return fmt.Errorf("--site %s needs its configuration from a file (--config), not a ConfigMap: the leaf node is provisioned from it", s.Site)
	}
	reload := b.Reload
	if reload == nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		reload = hup
	}
	// A taken address is reported now, naming every one and how to change
	// it, rather than by whichever part fails first.
	addrs := s.Addrs()
	if err := CheckAddrs(addrs...); err != nil {
		return err
	}
	url := s.NATSURL
	if url == "" {
		ns, err := startEmbedded(s, dir)
		if err != nil {
			return addrs[0].IfTaken(err)
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		url = ns.ClientURL()
		log.Info("embedded NATS server started", "url", url, "users", s.EmbeddedConfig != "")
		if !loopback(s.Embedded) && s.EmbeddedConfig == "" {
			log.Warn("the embedded NATS server listens beyond this machine and requires no users: anyone who reaches it can publish renders and deploy orders; give --nats-server-config (weft nats-config)", "addr", s.Embedded)
		}
	}
	var provision []msg.ProvisionOption
	if fileCfg != nil {
		provision = fileCfg.ProvisionOptions(s.Site)
	}
	env, reg, refused, closeNATS, err := connect(ctx, s, url, b, tracing, log, provision...)
	if err != nil {
		return err
	}
	defer closeNATS()
	gens := &generations{base: reg}
	g, gctx := errgroup.WithContext(ctx)
	var configs <-chan *config.Config
	if fileCfg != nil && b.ConfigText != nil {
		// Made by the program: nothing to follow.
		configs = prepend(gctx, fileCfg, nil)
		g.Go(func() error {
			return ignoreReloads(gctx, reload, log, "SIGHUP ignored: the configuration is made from the command line")
		})
	} else if fileCfg != nil {
		f := liveconfig.File{Path: s.Config, Dir: dir, Running: fileHash, Reload: reload, Watch: s.WatchConfig}
		if b.ConfigFile != "" {
			f.Path, f.Read = b.ConfigFile, b.ReadConfig
		}
		later, err := liveconfig.FollowFile(gctx, env, f)
		if err != nil {
			return err
		}
		configs = prepend(gctx, fileCfg, later)
		log.Info("following the configuration file: SIGHUP reloads it", "path", f.Path, "watch", s.WatchConfig)
	} else {
		if b.ConfigMap != nil {
			g.Go(func() error { return b.ConfigMap(gctx, env, s) })
		}
		env.Health.Pending("configuration")
		if configs, err = liveconfig.Watch(gctx, env, dir); err != nil {
			return err
		}
		g.Go(func() error {
			return ignoreReloads(gctx, reload, log, "SIGHUP ignored: the configuration follows its ConfigMap", "config_map", s.ConfigMap)
		})
	}
	g.Go(func() error { return serveHealth(gctx, s, env, gens) })
	if !b.NoSystemd {
		g.Go(func() error { return notifySystemd(gctx, env, sdnotify.FromEnv(), s.Site, gens.current) })
	}
	if !s.SkipProvision {
		configs = reprovisionOn(gctx, env, s, env.JS, refused, fileCfg, configs)
	}
	g.Go(func() error { return runServices(gctx, env, gens, b.Services, configs) })
	err = g.Wait()
	log.Info("stopped", "err", err)
	return err
}

// runWithoutConfig is Run for a binary with NoConfig: the services run
// once, on no configuration.
func runWithoutConfig(ctx context.Context, s Settings, b Binary, tracing *telemetry.Tracing, log *slog.Logger) error {
	if s.NATSURL == "" {
		return errors.New("--nats-url (or WEFT_NATS_URL) is required: this program embeds no NATS server")
	}
	if err := CheckAddrs(s.Addrs()...); err != nil {
		return err
	}
	env, reg, _, closeNATS, err := connect(ctx, s, s.NATSURL, b, tracing, log)
	if err != nil {
		return err
	}
	defer closeNATS()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHealth(gctx, s, env, reg) })
	g.Go(func() error { return runAll(gctx, env, b.Services, nil) })
	err = g.Wait()
	log.Info("stopped", "err", err)
	return err
}

// connect connects to the NATS server at url as the settings say (named
// b.Connection, "" for "weft"), provisions the streams and buckets unless
// told not to, and returns the services' environment, the process's
// metrics registry, and what closes the connection.
func connect(ctx context.Context, s Settings, url string, b Binary, tracing *telemetry.Tracing, log *slog.Logger, provision ...msg.ProvisionOption) (svc.Env, *prometheus.Registry, <-chan error, func(), error) {
	name := b.Connection
	if name == "" {
		name = "weft"
	}
	auth, err := s.NATS.Options()
	if err != nil {
		return svc.Env{}, nil, nil, nil, err
	}
	refused := make(chan error, 1)
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), natsauth.LogErrors(log, refused)}, auth...)...)
	if err != nil {
		return svc.Env{}, nil, nil, nil, fmt.Errorf("connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return svc.Env{}, nil, nil, nil, err
	}
	if !s.SkipProvision {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = natsauth.Provision(pctx, js, s.Replicas, refused, s.provisionOptions(provision...)...)
		cancel()
		if err != nil {
			nc.Close()
			return svc.Env{}, nil, nil, nil, err
		}
	}
	checks := health.NewChecks()
	checks.Func("nats", func() error {
		if !nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), checks)
	reg.MustRegister(tracing.Metrics()...)
	env := svc.Env{NC: nc, JS: js, Log: log, Registry: reg, Tracer: tracing.Provider(processService(b)), Health: checks, Replica: svc.ReplicaName(), Site: s.Site}
	return env, reg, refused, nc.Close, nil
}

// serveHealth serves /healthz, /readyz and /metrics (what metrics gathers)
// on the settings' --listen address until ctx is done.
func serveHealth(ctx context.Context, s Settings, env svc.Env, metrics prometheus.Gatherer) error {
	h := env.Health.Handler(metrics)
	if s.Pprof {
		h = withPprof(h)
	}
	if s.MetricsListen != "" && s.MetricsListen != s.Listen {
		return serveSplit(ctx, s, env, h)
	}
	err := health.Serve(ctx, s.Listen, h, func(a net.Addr) {
		env.Log.Info("serving /healthz, /readyz and /metrics", "addr", a.String())
	})
	if err != nil {
		addrs := s.Addrs()
		return addrs[len(addrs)-1].IfTaken(err)
	}
	return nil
}

// ignoreReloads logs each request on reload as ignored until ctx is done.
func ignoreReloads(ctx context.Context, reload <-chan os.Signal, log *slog.Logger, text string, args ...any) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reload:
			log.Info(text, args...)
		}
	}
}

// prepend yields first, then what rest yields until it is closed or ctx
// is done; a nil rest yields nothing more.
func prepend(ctx context.Context, first *config.Config, rest <-chan *config.Config) <-chan *config.Config {
	out := make(chan *config.Config, 1)
	out <- first
	if rest == nil {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		for c := range rest {
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// generations is what /metrics serves: the process's own registry and the
// registry of the running generation of services. Each generation (the
// services started on one configuration) registers its collectors on a
// registry of its own, so a service that registers its metrics on every
// start never collides with the generation before it; the counters of a
// new generation start from zero, as after a restart.
type generations struct {
	base *prometheus.Registry
	mu   sync.Mutex
	cur  *prometheus.Registry
	// cfg is the configuration the running generation runs on.
	cfg atomic.Pointer[config.Config]
}

// current returns the configuration the running generation runs on (nil
// before the first).
func (g *generations) current() *config.Config { return g.cfg.Load() }

// next starts the registry of a new generation.
func (g *generations) next() *prometheus.Registry {
	r := prometheus.NewRegistry()
	g.mu.Lock()
	g.cur = r
	g.mu.Unlock()
	return r
}

// Gather implements prometheus.Gatherer.
func (g *generations) Gather() ([]*dto.MetricFamily, error) {
	g.mu.Lock()
	gs := prometheus.Gatherers{g.base}
	if g.cur != nil {
		gs = append(gs, g.cur)
	}
	g.mu.Unlock()
	return gs.Gather()
}

// runServices runs services on each configuration from configs, stopping
// them before starting them again on the next, until ctx is done or one
// fails. With gens, each generation gets its own metrics registry.
func runServices(ctx context.Context, env svc.Env, gens *generations, services []Service, configs <-chan *config.Config) error {
	var cur *running
	defer func() { cur.stop() }()
	for {
		var done <-chan error
		if cur != nil {
			done = cur.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			cur = nil // finished: nothing to stop
			return err
		case cfg, ok := <-configs:
			if !ok {
				configs = nil // the source ended; keep running what runs
				continue
			}
			if cur != nil {
				env.Log.Info("configuration changed; restarting services", "hash", cfg.Hash)
				if err := cur.stop(); err != nil {
					return err
				}
			}
			env.Health.Set("configuration", nil)
			genv := env
			if gens != nil {
				genv.Registry = gens.next()
				gens.cfg.Store(cfg)
			}
			cur = start(ctx, genv, services, cfg)
		}
	}
}

// running is one generation of services on one configuration.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(ctx context.Context, env svc.Env, services []Service, cfg *config.Config) *running {
	ctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- runAll(ctx, env, services, cfg) }()
	return r
}

// stop cancels the generation and waits for it.
func (r *running) stop() error {
	if r == nil {
		return nil
	}
	r.cancel()
	return <-r.done
}

func runAll(ctx context.Context, env svc.Env, services []Service, cfg *config.Config) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, sv := range services {
		g.Go(func() error {
			if err := sv.Run(ctx, env, cfg); err != nil {
				return fmt.Errorf("%s: %w", sv.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func startEmbedded(s Settings, configDir string) (*server.Server, error) {
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
		dir = filepath.Join(configDir, ".weft")
	}
	return embedded.Start(embedded.Options{Host: host, Port: port, StoreDir: dir, ConfigFile: s.EmbeddedConfig})
}

// negated is a boolean flag that sets the negation of its value.
type negated bool

func (n *negated) String() string {
	if n == nil {
		return "true"
	}
	return strconv.FormatBool(!bool(*n))
}

func (n *negated) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	*n = negated(!b)
	return nil
}

func (*negated) IsBoolFlag() bool { return true }

// loopback reports an address whose host is a loopback address or
// localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// provisionOptions adds the settings' bundle store cap to opts.
func (s Settings) provisionOptions(opts ...msg.ProvisionOption) []msg.ProvisionOption {
	if s.BundleStoreMaxBytes > 0 {
		opts = append(opts, msg.WithBundleStoreMaxBytes(s.BundleStoreMaxBytes))
	}
	return opts
}
