// Command weft-renderer runs the renderer service against a NATS server,
// and the validating admission webhook when --webhook-listen says where.
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
	var o renderer.Options
	return host.Main(host.Binary{Name: "weft-renderer", Flags: o.Flags, Services: []host.Service{{Name: renderer.Service, Run: o.Run}}}, os.Args[1:])
}
