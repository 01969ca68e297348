package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/cmd/weft/internal/statusview"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "status", summary: "Show what each target last rendered, validated and deployed, and each source's sync\nstate and object count, from the status bucket of a running weft, and the image pulls\nnot done yet (waiting, pulling or failed). Exits 3 when a\ntarget's last render, validation or deploy failed, naming each on stderr."})
	url := fs.String("nats-url", envOr("WEFT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server of a running weft [WEFT_NATS_URL]")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	var auth natsauth.Client
	auth.Flags(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("status takes no arguments, got %q", fs.Args()))
	}
	opts, err := auth.Options()
	if err != nil {
		return usageError(err)
	}
	nc, err := nats.Connect(*url, append([]nats.Option{nats.Timeout(5 * time.Second), natsauth.LogErrors(slog.New(slog.NewTextHandler(stderr, nil)), nil)}, opts...)...)
	if err != nil {
		return fmt.Errorf("connect %s (is weft running? `make run` starts it): %w", *url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return fmt.Errorf("status bucket: %w", err)
	}
	rep, err := msg.ReadStatus(ctx, kv)
	if err != nil {
		return err
	}
	// The links to the sites whose statuses the hub sources.
	if rep.Sites, err = msg.ReadSites(ctx, js, rep.At); err != nil {
		return err
	}
	// The puller's pulls, when it runs (a weft without it has no bucket).
	if pulls, err := js.KeyValue(ctx, msg.BucketPulls); err == nil {
		if rep.Pulls, err = msg.ReadPulls(ctx, pulls); err != nil {
			return err
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("pulls bucket: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		statusview.Write(stdout, rep)
	}
	failing := statusview.Failing(rep)
	for _, f := range failing {
		fmt.Fprintln(stderr, "failing:", f)
	}
	if len(failing) > 0 {
		return &exitError{code: ExitFailing, err: fmt.Errorf("%d failing", len(failing)), quiet: true}
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
