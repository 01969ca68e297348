// Command weft-renderer runs the renderer service against a NATS server.
package main

import (
	"fmt"
	"os"

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/renderer"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "weft-renderer:", err)
		os.Exit(1)
	}
}

func run() error {
	return host.Main(host.Binary{Name: "weft-renderer", Services: []host.Service{{Name: renderer.Service, Run: renderer.Run}}}, os.Args[1:])
}
