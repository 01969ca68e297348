package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/validator"
)

// errRefused makes `weft validate` exit ExitFailed without another message.
var errRefused = &exitError{code: ExitFailed, err: errors.New("refused"), quiet: true}

func validateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "validate", args: " <bundle folder>", summary: "Run the target's validator kinds offline on a rendered bundle (haproxy.cfg, maps/,\nfiles/, certs/); exits 1 when a kind refuses it."})
	cfgPath := fs.String("config", "weft.yaml", "path of weft.yaml")
	target := fs.String("target", "", "target whose kinds, policy and base apply (default: the only one)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError(errors.New("validate: give one folder holding a rendered bundle (haproxy.cfg, maps/, files/, certs/)"))
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	name := *target
	if name == "" {
		if names := cfg.TargetNames(); len(names) == 1 {
			name = names[0]
		} else {
			return fmt.Errorf("the configuration has targets %v: pick one with --target", names)
		}
	}
	t, ok := cfg.Targets[name]
	if !ok {
		return fmt.Errorf("no target %q in the configuration", name)
	}
	b, err := readBundle(name, t.Base, fs.Arg(0))
	if err != nil {
		return err
	}
	checkers, err := validator.Checkers(cfg, t.Validate.Kinds)
	if err != nil {
		return err
	}
	refused := false
	for _, c := range checkers {
		problems, err := c.Check(ctx, b)
		verdict := "ok"
		switch {
		case err != nil:
			verdict, refused = "could not decide: "+err.Error(), true
		case failed(problems):
			verdict, refused = "refused", true
		}
		fmt.Fprintf(stdout, "%s: %s\n", c.Name(), verdict)
		for _, p := range problems {
			loc := p.File
			if p.Line > 0 {
				loc = fmt.Sprintf("%s:%d", p.File, p.Line)
			}
			if loc == "" {
				loc = "-"
			}
			fmt.Fprintf(stdout, "  %s %s: %s\n", severity(p), loc, p.Message)
		}
	}
	if refused {
		return errRefused
	}
	return nil
}

func failed(ps []msg.Problem) bool {
	for _, p := range ps {
		if p.Severity != "warning" {
			return true
		}
	}
	return false
}

func severity(p msg.Problem) string {
	if p.Severity == "" {
		return "error"
	}
	return p.Severity
}

// readBundle reads a rendered bundle laid out in dir.
func readBundle(target, base, dir string) (msg.Bundle, error) {
	kinds := map[string]string{"maps": msg.FileMap, "files": msg.FileFile, "certs": msg.FileCert}
	var files []msg.BundleFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		kind := msg.FileFile
		if rel == "haproxy.cfg" {
			kind = msg.FileConfig
		} else if k, ok := kinds[strings.SplitN(rel, "/", 2)[0]]; ok {
			kind = k
		} else {
			return nil // not part of a bundle (reloads.log, manifests of a driver)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, msg.BundleFile{Path: rel, Kind: kind, Name: filepath.Base(rel), Content: data})
		return nil
	})
	if err != nil {
		return msg.Bundle{}, fmt.Errorf("read bundle: %w", err)
	}
	return msg.NewBundle(target, base, "haproxy.cfg", files)
}
