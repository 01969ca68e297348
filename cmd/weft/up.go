package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

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
	fs := newFlags(command{name: "up", summary: "Run every service (watcher, renderer, validator, deployer) in one process, over an\nembedded NATS server unless --nats-url names one, until SIGINT or SIGTERM."})
	var s host.Settings
	s.Flags(fs, binary.EmbeddedDefault)
	demoDefault, _ := strconv.ParseBool(os.Getenv("WEFT_DEMO"))
	withDemo := fs.Bool("demo", demoDefault, "also start HAProxy on 127.0.0.1 and echo backends for the EndpointSlices, and deliver the one target to HAProxy with the runtime driver (when haproxy is missing: as configured, without the haproxy validator kind; WEFT_HAPROXY names the binary) [WEFT_DEMO]")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if !*withDemo {
		return host.Run(ctx, s, binary)
	}
	return upDemo(ctx, s)
}

func upDemo(ctx context.Context, s host.Settings) error {
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
		return host.Run(ctx, s, onConfig(binary, func(c *config.Config) *config.Config {
			c, _ = demo.WithoutHAProxyKind(c)
			return c
		}))
	}
	plan, err := demo.Prepare(cfg)
	if err != nil {
		log.Warn("the demo cannot run this configuration: running it without HAProxy", "err", err, "files", strings.Join(dests(cfg), ", "))
		return host.Run(ctx, s, binary)
	}
	return demo.Run(ctx, demo.Options{Plan: plan, HAProxy: bin, Log: log}, func(ctx context.Context, path, dataDir string) error {
		s.Config = path
		if s.DataDir == "" {
			s.DataDir = dataDir
		}
		return host.Run(ctx, s, binary)
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
