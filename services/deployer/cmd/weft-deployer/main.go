// Command weft-deployer runs the deployer service against a NATS server;
// with --site, at a site, on the site's NATS leaf node.
package main

import (
	"fmt"
	"os"

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/deployer"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "weft-deployer:", err)
		os.Exit(1)
	}
}

func run() error {
	return host.Main(host.Binary{Name: "weft-deployer", Sites: true, Services: []host.Service{{Name: deployer.Service, Run: deployer.Run}}}, os.Args[1:])
}
