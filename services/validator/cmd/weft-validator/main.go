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
	return host.Main("weft-validator", os.Args[1:], false, host.Service{Name: validator.Service, Run: validator.Run})
}
