// Command weft-validator runs the validator service against a NATS server.
package main

import (
	"fmt"
	"os"

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/validator"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "weft-validator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o validator.Options
	return host.Main(host.Binary{Name: "weft-validator", Flags: o.Flags, Services: []host.Service{{Name: validator.Service, Run: o.Run}}}, os.Args[1:])
}
