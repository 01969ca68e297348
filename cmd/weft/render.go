package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/weftio/weft/cmd/weft/internal/offline"
	"github.com/weftio/weft/pkg/config"
)

func renderCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "render", summary: "Render a target offline, without NATS, from a folder of manifests into a folder:\nfor template authors and their CI."})
	cfgPath := fs.String("config", "weft.yaml", "path of weft.yaml")
	target := fs.String("target", "", "target to render (default: the only one)")
	resources := fs.String("resources", "", "folder of manifests (default: the config's manifests source)")
	out := fs.String("out", "", "folder to write the bundle into (required)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *out == "" {
		return usageError(errors.New("render: --out is required"))
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	res, err := offline.Render(ctx, cfg, offline.Options{Target: *target, Resources: *resources, Out: *out})
	for _, p := range res.ManifestErrors {
		fmt.Fprintln(stderr, "manifest error:", p)
	}
	for _, e := range res.ResourceErrors {
		fmt.Fprintf(stderr, "resource error: %s %s: %s\n", e.Type, e.ID, e.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rendered target %s (%d objects) into %s: %d files, bundle %s\n", res.Target, res.Objects, *out, len(res.Bundle.Files), res.Bundle.Hash[:12])
	return nil
}
