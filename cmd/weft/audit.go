package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/cmd/weft/internal/audit"
	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

// natsFlags are the flags of a command that reads a running weft.
type natsFlags struct {
	url  *string
	auth natsauth.Client
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	n.url = fs.String("nats-url", envOr("WEFT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server of a running weft [WEFT_NATS_URL]")
	n.auth.Flags(fs)
}

// connect connects to the NATS server of a running weft; the server's
// refusals are logged on stderr.
func (n *natsFlags) connect(stderr io.Writer) (*nats.Conn, error) {
	opts, err := n.auth.Options()
	if err != nil {
		return nil, usageError(err)
	}
	nc, err := nats.Connect(*n.url, append([]nats.Option{nats.Timeout(5 * time.Second), natsauth.LogErrors(slog.New(slog.NewTextHandler(stderr, nil)), nil)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect %s (is weft running? `make run` starts it): %w", *n.url, err)
	}
	return nc, nil
}

const auditSummary = `Print what weft did, in time order, from its streams: resource changes, renders
(version, bundle, cause, the objects changed and their fields, or the failure),
verdicts (each validator kind with its duration and problems, missing kinds,
cached), deploy orders and their outcomes per instance (reload or runtime
operations), dead letters (service, subject, reason) and, with --follow,
triggers. Read-only: the auditor's NATS user suffices.

--target keeps what concerns one target: its renders, verdicts, deploys and
triggers, the dead letters naming it, and the changes of the types it reads
(with --config, the watched types of that weft.yaml; without, every change).
--json prints one JSON object per line: at, kind (change, sync, trigger,
render, verdict, deploy, deployed, dlq, unreadable), subject, stream, seq,
traceId, and the message under its kind's field (change, sync, trigger,
render, verdict, order, deployed, deadLetter; orderSeq on deployed).`

func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "audit", summary: auditSummary})
	var nf natsFlags
	nf.register(fs)
	since := fs.Duration("since", time.Hour, "how far back to start (0: all the streams keep)")
	target := fs.String("target", "", "only what concerns this target")
	cfgPath := fs.String("config", "", "weft.yaml whose watched types a --target reads (optional)")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	follow := fs.Bool("follow", false, "keep printing what happens until interrupted")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("audit takes no arguments, got %q", fs.Args()))
	}
	if *since < 0 {
		return usageError(fmt.Errorf("--since must not be negative, got %v", *since))
	}
	filter := audit.Filter{Target: *target}
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if *target != "" {
			if _, ok := cfg.Targets[*target]; !ok {
				return fmt.Errorf("%s has no target %q (targets: %s)", *cfgPath, *target, strings.Join(cfg.TargetNames(), ", "))
			}
			filter.Types = map[string]bool{config.ValuesType: true}
			for _, t := range cfg.ResourceTypes() {
				filter.Types[t] = true
			}
		}
	}
	nc, err := nf.connect(stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	conn, err := audit.NewConn(nc)
	if err != nil {
		return err
	}
	if *target != "" && *cfgPath == "" {
		if err := knownTarget(ctx, conn, *target); err != nil {
			return err
		}
	}
	var start time.Time
	if *since > 0 {
		start = time.Now().Add(-*since)
	}
	feed, err := audit.Open(ctx, conn, audit.Sources(*target), start, *follow)
	if err != nil {
		return err
	}
	defer feed.Close()
	write := audit.Write
	if *asJSON {
		write = audit.WriteJSON
	}
	history, err := feed.History(ctx)
	if err != nil {
		if *follow && errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	for _, e := range history {
		if filter.Match(e) {
			if err := write(stdout, e); err != nil {
				return err
			}
		}
	}
	for *follow {
		e, err := feed.Next(ctx)
		if err != nil {
			return nil // interrupted: the end of following
		}
		if filter.Match(e) {
			if err := write(stdout, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownTarget checks that the status bucket knows target.
func knownTarget(ctx context.Context, c audit.Conn, target string) error {
	rep, err := readStatus(ctx, c)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range rep.Targets {
		if t.Target == target {
			return nil
		}
		names = append(names, t.Target)
	}
	return fmt.Errorf("no target %q in weft's status (targets: %s)", target, strings.Join(names, ", "))
}

// readStatus reads the status bucket of a running weft.
func readStatus(ctx context.Context, c audit.Conn) (msg.StatusReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := c.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return msg.StatusReport{}, fmt.Errorf("status bucket: %w", err)
	}
	return msg.ReadStatus(ctx, kv)
}
