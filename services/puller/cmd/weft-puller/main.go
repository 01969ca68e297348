// Command weft-puller runs the puller's parts. `weft-puller controller`
// turns PrePullPolicies and their workloads into PrePullImages, pull
// orders and pull Jobs, on weft.yaml's puller section (see package
// controller). `weft-puller agent --node <name>` is the node agent: it
// carries out the node's pull orders through the container runtime's CRI
// socket (see package agent). `weft-puller gate` is the rollout gate: the
// mutating admission webhook that adds the scheduling gate to new pods of
// gated workloads, and the release that removes it once their images are
// warm or after the policy's gateTimeout (see package gate).
//
// Exit codes: 0 success (and -h), 1 failed, 2 bad command line.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "weft-puller:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "weft-puller:", strings.ReplaceAll(err.Error(), "\n", "\nweft-puller: "))
		os.Exit(1)
	}
}

// errUsage marks a wrong command line.
var errUsage = errors.New("usage")

const usage = `usage: weft-puller <command> [flags]

commands:
  controller  turn policies and workloads into PrePullImages, pull orders and pull Jobs (weft.yaml's puller section)
  agent       carry out the pull orders of one node through its container runtime (CRI)
  gate        the rollout gate: the admission webhook adding the scheduling gate, and its removal

weft-puller <command> -h lists the command's flags.
`

func run(args []string, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch args[0] {
	case "agent":
		return runAgent(args[1:], stderr)
	case "controller":
		return runController(args[1:], stderr)
	case "gate":
		return runGate(args[1:], stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}
