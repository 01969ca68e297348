package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/cmd/weft/internal/statusview"
	"github.com/weftio/weft/pkg/msg"
)

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("weft status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats-url", envOr("WEFT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server of a running weft [WEFT_NATS_URL]")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := nats.Connect(*url, nats.Timeout(5*time.Second))
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
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	statusview.Write(stdout, rep)
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
