package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/weftio/weft/cmd/weft/internal/demo"
	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// binary is what `weft up` runs.
var binary = host.Binary{Name: "weft up", EmbeddedDefault: true, Services: Services}

// upCmd runs every service until ctx is done; with --demo, against a real
// HAProxy when one is installed (package demo).
func upCmd(ctx context.Context, args []string) error {
	// SIGHUP reloads the configuration (host.Run); one received while the
	// demo starts is kept for then, rather than ending weft.
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	b := binary
	b.Reload = reload
	fs := flag.NewFlagSet(b.Name, flag.ContinueOnError)
	var s host.Settings
	s.Flags(fs, binary.EmbeddedDefault)
	demoDefault, _ := strconv.ParseBool(os.Getenv("WEFT_DEMO"))
	withDemo := fs.Bool("demo", demoDefault, "also start HAProxy on 127.0.0.1 and echo backends for the EndpointSlices, and deliver the one target to HAProxy with the runtime driver (as configured when haproxy is missing) [WEFT_DEMO]")
	parentDefault, _ := strconv.ParseBool(os.Getenv("WEFT_EXIT_WITH_PARENT"))
	withParent := fs.Bool("exit-with-parent", parentDefault, "stop (as on SIGTERM) when the process that started weft ends, killed or not; Linux only (make run sets it) [WEFT_EXIT_WITH_PARENT]")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *withParent {
		if err := exitWithParent(); err != nil {
			return err
		}
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
	bin, ok := demo.FindHAProxy(demo.HAProxyCandidates...)
	if !ok {
		log.Warn("haproxy not found (looked on PATH and at /usr/sbin/haproxy): running without HAProxy; the rendered files are delivered as configured",
			"files", strings.Join(dests(cfg), ", "))
		return host.Run(ctx, s, b)
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

// dests lists where the targets are delivered.
func dests(cfg *config.Config) []string {
	var out []string
	for _, name := range cfg.TargetNames() {
		out = append(out, cfg.Targets[name].Deploy.Dest)
	}
	return out
}
