package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/puller/controller"
)

const controllerName = "weft-puller controller"

// runController runs the controller (package controller) on weft.yaml's
// puller section, with the common settings of every weft binary
// (--config, --nats-url, --listen, ... and their WEFT_* variables).
func runController(args []string, stderr io.Writer) error {
	// The command line is checked first, so a wrong one is a usage error.
	fs := flag.NewFlagSet(controllerName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s host.Settings
	s.Flags(fs, false)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return host.Main(host.Binary{
		Name:     controllerName,
		Services: []host.Service{{Name: controller.Service, Run: controller.RunConfig}},
	}, args)
}
