// Command weft-watcher runs the watcher service against a NATS server.
package main

import (
	"fmt"
	"os"

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/watcher"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "weft-watcher:", err)
		os.Exit(1)
	}
}

func run() error {
	return host.Main(host.Binary{Name: "weft-watcher", Services: []host.Service{{Name: watcher.Service, Run: watcher.Run}}}, os.Args[1:])
}
