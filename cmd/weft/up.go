package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/weftio/weft/cmd/weft/internal/demo"
	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/services/validator/haproxycheck"
)

// binary is what `weft up` runs.
var binary = host.Binary{Name: "weft up", EmbeddedDefault: true, Services: Services}

// upCmd runs every service until ctx is done; with --demo, against a real
// HAProxy when one is installed (package demo), and without one on the
// configuration less the haproxy validator kind.
func upCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// SIGHUP reloads the configuration (host.Run); one received while the
	// demo starts is kept for then, rather than ending weft.
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	b := binary
	b.Reload = reload
	b.Version = version // service.version of the spans
	fs := newFlags(command{name: "up", summary: "Run every service (watcher, renderer, validator, deployer) in one process, over an\nembedded NATS server unless --nats-url names one, until SIGINT or SIGTERM. SIGHUP,\nor a change of the configuration file, reads the configuration again. With --site,\nonly the deployer of that site's targets, on the site's NATS leaf node."})
	var s host.Settings
	s.Flags(fs, binary.EmbeddedDefault)
	s.SiteFlag(fs)
	demoDefault, _ := strconv.ParseBool(os.Getenv("WEFT_DEMO"))
	withDemo := fs.Bool("demo", demoDefault, "also start HAProxy on 127.0.0.1 and echo backends for the EndpointSlices, and deliver the one target to HAProxy with the runtime driver (when haproxy is missing: as configured, without the haproxy validator kind; WEFT_HAPROXY names the binary) [WEFT_DEMO]")
	parentDefault, _ := strconv.ParseBool(os.Getenv("WEFT_EXIT_WITH_PARENT"))
	withParent := fs.Bool("exit-with-parent", parentDefault, "stop (as on SIGTERM) when the process that started weft ends, killed or not; Linux only (make run sets it) [WEFT_EXIT_WITH_PARENT]")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	s.Given(fs)
	if *withParent {
		if err := exitWithParent(); err != nil {
			return err
		}
	}
	if s.Site != "" {
		if *withDemo {
			return usageError(errors.New("--demo and --site do not go together"))
		}
		if s.NATSURL == "" {
			return usageError(errors.New("--site needs --nats-url: the site's NATS leaf node, whose JetStream domain is the site's"))
		}
		b.Services = SiteServices
	}
	var err error
	if !*withDemo {
		err = host.Run(ctx, s, b)
	} else {
		err = upDemo(ctx, s, b)
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// SIGINT or SIGTERM while starting: a stop as asked, not a failure.
		fmt.Fprintln(os.Stderr, "weft: stopped while starting:", err)
		return nil
	}
	return err
}

func upDemo(ctx context.Context, s host.Settings, b host.Binary) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := telemetry.NewLogger(os.Stderr, level)
	cfg, err := config.Load(s.Config)
	if err != nil {
		return err
	}
	bin, err := haproxycheck.Find()
	if err != nil {
		// The quickstart without haproxy: the files as configured, validated
		// by every kind that can run here.
		_, skipped := demo.WithoutHAProxyKind(cfg)
		log.Warn("haproxy not found: running without HAProxy and without the haproxy validator kind; the rendered files are delivered as configured; "+haproxycheck.Install+" brings both",
			"err", err.Error(), "skipped_kind", config.KindHAProxy, "targets", strings.Join(skipped, ", "), "files", strings.Join(dests(cfg), ", "))
		return host.Run(ctx, s, onConfig(b, func(c *config.Config) *config.Config {
			c, _ = demo.WithoutHAProxyKind(c)
			return c
		}))
	}
	plan, err := demo.Prepare(cfg)
	if err != nil {
		log.Warn("the demo cannot run this configuration: running it without HAProxy", "err", err, "files", strings.Join(dests(cfg), ", "))
		return host.Run(ctx, s, b)
	}
	// Every address is checked before anything starts: a second `weft up
	// --demo` fails at once, naming each and how to change it.
	addrs, err := plan.Addrs(s.Config)
	if err != nil {
		return err
	}
	if err := host.CheckAddrs(append(s.Addrs(), addrs...)...); err != nil {
		return err
	}
	// weft runs the demo's runtime configuration, derived from the file
	// given, which is the one followed for changes.
	b.ConfigFile = s.Config
	b.ReadConfig = func() ([]byte, error) { return plan.Reread(b.ConfigFile) }
	return demo.Run(ctx, demo.Options{Plan: plan, HAProxy: bin, Log: log}, func(ctx context.Context, path, dataDir string) error {
		s.Config = path
		if s.DataDir == "" {
			s.DataDir = dataDir
		}
		return host.Run(ctx, s, b)
	})
}

// onConfig returns b whose services run on adjust(cfg) in place of each
// configuration cfg the host gives them; every service of a generation gets
// the same adjusted configuration.
func onConfig(b host.Binary, adjust func(*config.Config) *config.Config) host.Binary {
	var (
		mu       sync.Mutex
		from, to *config.Config
	)
	adjusted := func(cfg *config.Config) *config.Config {
		mu.Lock()
		defer mu.Unlock()
		if cfg != from {
			from, to = cfg, adjust(cfg)
		}
		return to
	}
	services := make([]host.Service, len(b.Services))
	for i, sv := range b.Services {
		services[i] = host.Service{Name: sv.Name, Run: func(ctx context.Context, env svc.Env, cfg *config.Config) error {
			return sv.Run(ctx, env, adjusted(cfg))
		}}
	}
	b.Services = services
	return b
}

// dests lists where the targets are delivered.
func dests(cfg *config.Config) []string {
	var out []string
	for _, name := range cfg.TargetNames() {
		out = append(out, cfg.Targets[name].Deploy.Dest)
	}
	return out
}
