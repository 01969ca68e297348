package main

import (
	"io"

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/puller/controller"
)

const controllerName = "weft-puller controller"

// runController runs the controller (package controller) on weft.yaml's
// puller section, with the common settings of every weft binary
// (--config, --nats-url, --listen, ... and their WEFT_* variables).
func runController(args []string, stderr io.Writer) error {
	s, err := command{name: controllerName}.parse(args, stderr)
	if err != nil {
		return err
	}
	return serve(s, host.Binary{
		Name:     controllerName,
		Services: []host.Service{{Name: controller.Service, Run: controller.RunConfig}},
	})
}
