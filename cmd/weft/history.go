package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/cmd/weft/internal/historyview"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

// apiCommand is what the history, diff, rollback and unpin commands share:
// a running weft's NATS, and the printing of an answer.
type apiCommand struct {
	c      command
	fs     *flag.FlagSet
	url    *string
	asJSON *bool
	auth   natsauth.Client
}

func newAPICommand(c command) *apiCommand {
	a := &apiCommand{c: c, fs: newFlags(c)}
	a.url = a.fs.String("nats-url", envOr("WEFT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server of a running weft [WEFT_NATS_URL]")
	a.asJSON = a.fs.Bool("json", false, "print the answer as JSON")
	a.auth.Flags(a.fs)
	return a
}

// parse parses args, flags before, between or after the arguments, and
// returns the arguments, which must be want many.
func (a *apiCommand) parse(args []string, want int, stdout, stderr io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(a.fs, args, stdout, stderr); err != nil {
			return nil, err
		}
		if a.fs.NArg() == 0 {
			break
		}
		pos = append(pos, a.fs.Arg(0))
		args = a.fs.Args()[1:]
	}
	if len(pos) != want {
		a.fs.SetOutput(stderr)
		a.fs.Usage()
		return nil, usageError(fmt.Errorf("%s takes%s, got %q", a.fs.Name(), a.c.args, pos))
	}
	return pos, nil
}

// ask sends req to subject on a running weft and decodes the answer into
// into; an error answer is the error.
func ask[Req, Rep msg.Message](ctx context.Context, a *apiCommand, stderr io.Writer, subject string, req Req, into Rep) error {
	opts, err := a.auth.Options()
	if err != nil {
		return usageError(err)
	}
	nc, err := nats.Connect(*a.url, append([]nats.Option{nats.Timeout(5 * time.Second), natsauth.LogErrors(slog.New(slog.NewTextHandler(stderr, nil)), nil)}, opts...)...)
	if err != nil {
		return fmt.Errorf("connect %s (is weft running? `make run` starts it): %w", *a.url, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = msg.Ask(ctx, nc, subject, req, into)
	if err == nil || msg.IsAPIError(err) {
		return err
	}
	return fmt.Errorf("%w (no deployer answered: is weft running, and may this user ask it?)", err)
}

// printJSON prints v as indented JSON when --json asked for it.
func (a *apiCommand) printJSON(stdout io.Writer, v any) (bool, error) {
	if !*a.asJSON {
		return false, nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return true, enc.Encode(v)
}

func historyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAPICommand(command{name: "history", args: " <target>", summary: "List a target's kept bundles, newest first: version, bundle hash, render time, verdict\n(refused: why), the instances that ran it and since when, and what holds it now (the\npin, the last accepted bundle, the instances running it)."})
	pos, err := a.parse(args, 1, stdout, stderr)
	if err != nil {
		return err
	}
	var h msg.HistoryReply
	if err := ask(ctx, a, stderr, msg.APIHistorySubject(pos[0]), msg.HistoryRequest{}, &h); err != nil {
		return err
	}
	if done, err := a.printJSON(stdout, h); done || err != nil {
		return err
	}
	historyview.History(stdout, h)
	return nil
}

func diffCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAPICommand(command{name: "diff", args: " <target> <from> <to>", summary: "Show the unified diff, file by file, from one bundle of a target's history to another;\nfiles added and removed are shown whole. Bundles are named by version (3 or v3) or by\nbundle hash (or its first characters)."})
	pos, err := a.parse(args, 3, stdout, stderr)
	if err != nil {
		return err
	}
	var d msg.DiffReply
	if err := ask(ctx, a, stderr, msg.APIDiffSubject(pos[0]), msg.DiffRequest{From: pos[1], To: pos[2]}, &d); err != nil {
		return err
	}
	if done, err := a.printJSON(stdout, d); done || err != nil {
		return err
	}
	historyview.Diff(stdout, d)
	return nil
}

func rollbackCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAPICommand(command{name: "rollback", args: " <target> --to <version|hash>", summary: "Deploy an accepted bundle of the target's history to every instance and pin the target\nthere: later bundles are still rendered and validated, but not deployed until\n`weft unpin <target>`."})
	to := a.fs.String("to", "", "the bundle to roll back to: a version (3 or v3) or a bundle hash (or its first characters)")
	by := a.fs.String("by", whoAmI(), "who rolls back, shown with the pin")
	reason := a.fs.String("reason", "", "why, shown with the pin")
	pos, err := a.parse(args, 1, stdout, stderr)
	if err != nil {
		return err
	}
	if *to == "" {
		return usageError(fmt.Errorf("rollback needs --to <version|hash>"))
	}
	var r msg.RollbackReply
	if err := ask(ctx, a, stderr, msg.APIRollbackSubject(pos[0]), msg.RollbackRequest{To: *to, By: *by, Reason: *reason}, &r); err != nil {
		return err
	}
	if done, err := a.printJSON(stdout, r); done || err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s pinned on v%d (%s)\n", r.Pin.Target, r.Pin.Version, r.Pin.BundleHash)
	printInstances(stdout, r.Instances)
	return nil
}

func unpinCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAPICommand(command{name: "unpin", args: " <target>", summary: "Lift the pin a rollback set on the target and deploy its last accepted bundle."})
	by := a.fs.String("by", whoAmI(), "who lifts the pin, for the deployer's log")
	pos, err := a.parse(args, 1, stdout, stderr)
	if err != nil {
		return err
	}
	var u msg.UnpinReply
	if err := ask(ctx, a, stderr, msg.APIUnpinSubject(pos[0]), msg.UnpinRequest{By: *by}, &u); err != nil {
		return err
	}
	if done, err := a.printJSON(stdout, u); done || err != nil {
		return err
	}
	if u.Lifted == nil {
		fmt.Fprintf(stdout, "%s was not pinned; it should run v%d (%s)\n", u.Target, u.Version, u.BundleHash)
		return nil
	}
	fmt.Fprintf(stdout, "%s unpinned (was v%d); deploying v%d (%s)\n", u.Target, u.Lifted.Version, u.Version, u.BundleHash)
	printInstances(stdout, u.Instances)
	return nil
}

func printInstances(w io.Writer, ins []string) {
	if len(ins) == 0 {
		fmt.Fprintln(w, "delivered by the deployer of its site")
		return
	}
	fmt.Fprintf(w, "ordered to %s\n", strings.Join(ins, ", "))
}

// whoAmI names the person running weft, for a pin's "by".
func whoAmI() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil && name != "" {
		return name + "@" + host
	}
	return name
}
