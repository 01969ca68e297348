// Command weft runs every weft service in one process (`weft up`, with an
// embedded NATS server by default) and offers the tools a person needs
// around it: `weft render` (offline render for template authors and CI),
// `weft confd` (a confd confdir run from confd's command line),
// `weft status` (what each target last rendered, validated and deployed),
// `weft audit` (what happened, in time order, from the streams) and
// `weft why` (what an instance runs, back to the changes that made it).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/deployer"
	pullercontroller "github.com/weftio/weft/services/puller/controller"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher"
)

const usage = `usage: weft <command> [flags]

commands:
  up       run every service in one process (embedded NATS unless --nats-url;
           --demo: also a real HAProxy with echo backends to send HTTP through)
  confd    run a confd confdir with confd's flags (-onetime, -backend, -node,
           -prefix, -confdir, -noop, -sync-only, ...; weft confd -h)
  render   render a target offline from a folder of manifests
  validate run the validator kinds offline on a rendered bundle
  status   show each target's render, validation and deploy state
  audit    print what changed, rendered, validated and deployed, in time
           order (--target T, --since 1h, --follow, --json)
  why      explain what a target's instances run: deploy, verdict, render
           and the object changes that made it (weft why <target>)
  history  list a target's kept bundles: verdicts, where they ran, the pin
  diff     show the unified diff of two bundles of a target's history
  rollback deploy an accepted bundle of the history and pin the target on it
  unpin    lift a target's pin and deploy its last accepted bundle
  nats-config  print the NATS server's users block: one user per role with
           exactly the permissions of its role (nkeys written to --keys)
  nats-keys  make the NATS keys of a Kubernetes installation in Secrets (one
           per role, kept when present) and the servers' users block
  provision  create or update every stream, bucket and store (run once with
           admin or provisioner credentials; services then --provision=false)
  version  print weft's version (also: weft --version)
  help     print this help, or a command's: weft help <command>
Run 'weft <command> -h' for the command's flags.

exit codes: 0 success (and -h); 1 the command failed (weft validate: a kind
refused); 2 bad command line; 3 weft status: a target's last render,
validation or deploy failed.
`

func main() {
	code, line := exitCode(run(os.Args[1:], os.Stdout, os.Stderr))
	if line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
	os.Exit(code)
}

// Services are the services `weft up` runs.
var Services = []host.Service{
	{Name: watcher.Service, Run: watcher.Run},
	{Name: renderer.Service, Run: renderer.Run},
	{Name: validator.Service, Run: validator.Run},
	{Name: deployer.Service, Run: deployer.Run},
	{Name: pullercontroller.Service, Run: runPullerController},
}

// SiteServices are the services `weft up --site` runs at a site, on its
// NATS leaf node: the deployer of the site's targets.
var SiteServices = []host.Service{
	{Name: deployer.Service, Run: deployer.Run},
}

// runPullerController runs the puller's controller when weft.yaml has a
// puller section and nothing otherwise (a nil return leaves the other
// services running). The node agent is not run here: it runs per node.
func runPullerController(ctx context.Context, env svc.Env, cfg *config.Config) error {
	if cfg.Puller == nil {
		return nil
	}
	return pullercontroller.RunConfig(ctx, env, cfg)
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: ExitUsage, err: errors.New("no command"), quiet: true}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "up":
		return upCmd(ctx, args[1:], stdout, stderr)
	case "render":
		return renderCmd(ctx, args[1:], stdout, stderr)
	case "confd":
		return confdCmd(ctx, args[1:], stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "audit":
		return auditCmd(ctx, args[1:], stdout, stderr)
	case "why":
		return whyCmd(ctx, args[1:], stdout, stderr)
	case "validate":
		return validateCmd(ctx, args[1:], stdout, stderr)
	case "history":
		return historyCmd(ctx, args[1:], stdout, stderr)
	case "diff":
		return diffCmd(ctx, args[1:], stdout, stderr)
	case "rollback":
		return rollbackCmd(ctx, args[1:], stdout, stderr)
	case "unpin":
		return unpinCmd(ctx, args[1:], stdout, stderr)
	case "nats-config":
		return natsConfigCmd(args[1:], stdout, stderr)
	case "nats-keys":
		return natsKeysCmd(ctx, args[1:], stdout, stderr)
	case "provision":
		return provisionCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprint(stdout, versionText())
		return nil
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && args[0] == "help" {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError(fmt.Errorf("unknown command %q", args[0]))
}
