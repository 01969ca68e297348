package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/envflag"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher"
)

// errPassDone ends a -onetime run whose every resource went through.
var errPassDone = errors.New("one pass done")

// confdCmd runs a confd confdir from confd's command line (see
// config.ParseConfd): every service in one process over an embedded NATS
// server whose storage is a temporary folder, removed at exit. With
// -onetime it makes one pass (every resource rendered, checked, delivered,
// reloaded) and exits, non-zero when a resource failed. With -noop it
// delivers nothing and prints each resource's pending change: once, with
// -onetime; else every time a resource renders something new.
func confdCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, err := config.ParseConfd(args, os.Getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		fmt.Fprintln(stderr, "weft confd: run 'weft confd -h' for confd's flags")
		return usageError(err)
	}
	text, err := s.Weft()
	if err != nil {
		return usageError(err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	// Problems of the confdir are reported now, as confd's are.
	cfg, err := config.ParseFile("weft confd", text, cwd)
	if err != nil {
		return confdProblems(err)
	}
	if s.Password != "" {
		if err := os.Setenv(config.ConfdPasswordEnv, s.Password); err != nil {
			return err
		}
	}
	dataDir, err := os.MkdirTemp("", "weft-confd-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dataDir) }()
	env := &envflag.Defaults{}
	listen := "127.0.0.1:9090"
	if s.OneTime {
		listen = "127.0.0.1:0"
	}
	hs := host.Settings{
		Config:      "weft confd",
		Embedded:    "127.0.0.1:0",
		DataDir:     dataDir,
		Listen:      env.String("WEFT_LISTEN", listen),
		LogLevel:    s.SlogLevel(),
		Replicas:    1,
		WatchConfig: false,
	}
	b := host.Binary{Name: "weft confd", EmbeddedDefault: true, Services: Services, ConfigText: text, ConfigDir: cwd, Version: version}
	diff := &pendingDiff{cfg: cfg, keep: s.KeepStageFile, out: stdout}
	var pass *onePass
	switch {
	case s.OneTime:
		pass = &onePass{cfg: cfg, noop: s.Noop, diff: diff}
		b.NoSystemd = true
		b.Services = append(upToValidation(), host.Service{Name: "onetime", Run: pass.run})
		if !s.Noop {
			b.Services = append(b.Services, host.Service{Name: deployer.Service, Run: deployer.Run})
		}
	case s.Noop:
		// Nothing is delivered, so there is no readiness to tell systemd.
		b.NoSystemd = true
		b.Services = append(upToValidation(), host.Service{Name: "noop", Run: (&noopRun{diff: diff}).run})
	}
	err = host.Run(ctx, hs, b)
	if errors.Is(err, errPassDone) {
		return pass.result(stderr)
	}
	return err
}

// upToValidation are the services that render and validate, without the
// deployer.
func upToValidation() []host.Service {
	return []host.Service{
		{Name: watcher.Service, Run: watcher.Run},
		{Name: renderer.Service, Run: renderer.Run},
		{Name: validator.Service, Run: validator.Run},
	}
}

// confdProblems names the flag behind each problem of the configuration
// made from confd's settings, whose positions would mean nothing to a
// person.
func confdProblems(err error) error {
	ps, ok := errors.AsType[config.Problems](err)
	if !ok {
		return err
	}
	lines := make([]string, len(ps))
	for i, p := range ps {
		flag := "-confdir"
		if strings.HasPrefix(p.Path, "sources") {
			flag = "-backend"
		}
		lines[i] = flag + ": " + p.Message
	}
	return errors.New(strings.Join(lines, "\n"))
}

// onePass follows one pass of every resource through the status bucket
// and ends the run (errPassDone) once each is delivered or has failed.
type onePass struct {
	cfg  *config.Config
	noop bool // stop at the verdict and print the pending changes
	diff *pendingDiff

	failed []string
}

func (p *onePass) run(ctx context.Context, env svc.Env, _ *config.Config) error {
	return followStatus(ctx, env, "onetime", func(rep msg.StatusReport) error {
		done, failed := p.judge(rep, sourceErrors(env))
		if !done {
			return nil
		}
		p.failed = failed
		if p.noop {
			if err := p.pending(ctx, env, rep); err != nil {
				p.failed = append(p.failed, err.Error())
			}
		}
		return errPassDone
	})
}

// followStatus reads weft's status every 100 ms and hands it to each until
// each returns an error, which it returns, or ctx ends (nil). A read that
// fails is logged (prefixed with what) and tried again at the next tick.
func followStatus(ctx context.Context, env svc.Env, what string, each func(msg.StatusReport) error) error {
	kv, err := env.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		rep, err := msg.ReadStatus(ctx, kv)
		if err != nil {
			env.Log.Warn(what+": reading the status", "err", err)
			continue
		}
		if err := each(rep); err != nil {
			return err
		}
	}
}

// watcherErrors counts the watcher's source problems, by source: the
// watcher logs each and counts it in this metric.
const watcherErrors = "weft_watcher_source_errors_total"

// sourceErrors returns how many problems each source has had.
func sourceErrors(env svc.Env) map[string]float64 {
	out := map[string]float64{}
	g, ok := env.Registry.(prometheus.Gatherer)
	if !ok {
		return out
	}
	families, err := g.Gather()
	if err != nil {
		return out
	}
	for _, f := range families {
		if f.GetName() != watcherErrors {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// judge says whether every resource went through and which failed: a
// source that had a problem before its first complete read (confd fails
// on a backend it cannot read), a render error, a refused bundle, a deploy
// (check_cmd, writing, reload_cmd) that failed.
func (p *onePass) judge(rep msg.StatusReport, sourceErrors map[string]float64) (bool, []string) {
	var failed []string
	synced := map[string]bool{}
	for _, sy := range rep.Syncs {
		synced[sy.Source] = synced[sy.Source] || sy.Synced
		if len(sy.Errors) > 0 {
			failed = append(failed, fmt.Sprintf("source %s: %s", sy.Source, strings.Join(sy.Errors, "; ")))
		}
	}
	for _, src := range p.cfg.Sources {
		if n := sourceErrors[src.Name]; n > 0 && !synced[src.Name] {
			failed = append(failed, fmt.Sprintf("source %s could not be read (%v problems before its first complete read; each is logged)", src.Name, n))
		}
	}
	if len(failed) > 0 {
		return true, failed
	}
	byName := map[string]msg.TargetReport{}
	for _, t := range rep.Targets {
		byName[t.Target] = t
	}
	done := true
	for _, name := range p.cfg.TargetNames() {
		t, res := byName[name], p.cfg.Targets[name].ConfdResource
		what := name
		if res != nil {
			what = res.Dest
		}
		switch {
		case t.Render == nil:
			done = false
		case t.Render.BundleHash == "" && t.Render.LastError != "":
			failed = append(failed, fmt.Sprintf("%s: render: %s", what, t.Render.LastError))
		case t.Validation == nil || t.Validation.BundleHash != t.Render.BundleHash || t.Validation.Undecided:
			done = false
		case !t.Validation.OK:
			failed = append(failed, fmt.Sprintf("%s: refused: %s", what, t.Validation.Reason))
		case p.noop:
		default:
			ok := false
			for _, d := range t.Deploys {
				// A refused or failing deploy keeps its error until one
				// succeeds.
				if d.LastError != "" {
					failed = append(failed, fmt.Sprintf("%s: %s", what, d.LastError))
				} else if d.BundleHash == t.Render.BundleHash && d.Deploys > 0 {
					ok = true
				}
			}
			if !ok && !slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, what+": ") }) {
				done = false
			}
		}
	}
	return done, failed
}

// pending prints, for each resource, the unified diff between its dest and
// what it renders now (nothing when they are equal).
func (p *onePass) pending(ctx context.Context, env svc.Env, rep msg.StatusReport) error {
	store := msg.NewBundleStore(env.JS)
	for _, t := range rep.Targets {
		if t.Render == nil {
			continue
		}
		if _, err := p.diff.show(ctx, store, t.Target, t.Render.BundleHash); err != nil {
			return err
		}
	}
	return nil
}

// result is the pass's outcome: nil, or an error naming every failure.
func (p *onePass) result(stderr io.Writer) error {
	if len(p.failed) == 0 {
		return nil
	}
	for _, f := range p.failed {
		fmt.Fprintln(stderr, "weft confd:", f)
	}
	return &exitError{code: ExitFailed, err: fmt.Errorf("%d resources failed", len(p.failed)), quiet: true}
}
