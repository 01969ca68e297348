// Command weft runs every weft service in one process (`weft up`, with an
// embedded NATS server by default) and offers the tools a person needs
// around it: `weft render` (offline render for template authors and CI) and
// `weft status` (what each target last rendered, validated and deployed).
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

	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher"
)

const usage = `usage: weft <command> [flags]

commands:
  up       run every service in one process (embedded NATS unless --nats-url;
           --demo: also a real HAProxy with echo backends to send HTTP through)
  render   render a target offline from a folder of manifests
  validate run the validator kinds offline on a rendered bundle
  status   show each target's render, validation and deploy state
Run 'weft <command> -h' for the command's flags.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errRefused) {
			fmt.Fprintln(os.Stderr, "weft:", err)
		}
		os.Exit(1)
	}
}

// Services are the services `weft up` runs.
var Services = []host.Service{
	{Name: watcher.Service, Run: watcher.Run},
	{Name: renderer.Service, Run: renderer.Run},
	{Name: validator.Service, Run: validator.Run},
	{Name: deployer.Service, Run: deployer.Run},
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "up":
		return upCmd(ctx, args[1:])
	case "render":
		return renderCmd(ctx, args[1:], stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "validate":
		return validateCmd(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
