package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/weftio/weft/pkg/svc/envflag"
	"github.com/weftio/weft/pkg/svc/host"
)

// command is the command line of one weft-puller command: the settings of
// every weft program (host.Settings) and the command's own flags, each
// defaulting to its WEFT_* variable.
type command struct {
	name string
	// noConfig: the command reads no weft.yaml (host.Binary.NoConfig), so
	// it takes only the connection settings.
	noConfig bool
	// flags registers the command's own flags; nil: none.
	flags func(fs *flag.FlagSet, env *envflag.Defaults)
	// check reports what is wrong with the parsed command line; nil:
	// nothing to check.
	check func(s host.Settings) error
}

// parse reads args. A wrong command line (an unknown flag, an argument, a
// WEFT_* variable that does not parse, what check reports) is errUsage;
// -h is flag.ErrHelp.
func (c command) parse(args []string, stderr io.Writer) (host.Settings, error) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s host.Settings
	if c.noConfig {
		s.ConnectionFlags(fs)
	} else {
		s.Flags(fs, false)
	}
	var env envflag.Defaults
	if c.flags != nil {
		c.flags(fs, &env)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	errs := []error{env.Err()}
	if c.check != nil {
		errs = append(errs, c.check(s))
	}
	if err := errors.Join(errs...); err != nil {
		return s, fmt.Errorf("%w: %v", errUsage, err)
	}
	return s, nil
}

// serve runs b with s until SIGINT or SIGTERM.
func serve(s host.Settings, b host.Binary) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return host.Run(ctx, s, b)
}
