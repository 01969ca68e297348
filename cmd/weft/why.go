package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/weftio/weft/cmd/weft/internal/audit"
	"github.com/weftio/weft/pkg/msg"
)

const whySummary = `Explain what an instance of a target runs now (from its deploy status), back to
the object changes that made it: the deploy outcome (when, the order's reason,
runtime operations or reload), the verdict (each kind, its duration, cached or
not), the render (version, bundle, cause, state revision, object counts) and the
changes between the previous render's state revision and this one's (type,
namespace/name, op, revision, the fields that differ when the render recorded
them), with trace ids. Without --instance: every instance of the target.
Exits 1 when the target or instance does not exist or a link of the chain has
aged out of the streams (what is left is printed all the same).
--json prints one JSON object (the chain) per instance and line.`

// changeSlack is how long before the previous render the changes it had
// not read are looked for: a change message is published right after its
// bucket write, so it may be stored a little before a render reads it.
const changeSlack = time.Minute

func whyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "why", args: " <target>", summary: whySummary})
	var nf natsFlags
	nf.register(fs)
	instance := fs.String("instance", "", "only this instance")
	asJSON := fs.Bool("json", false, "one JSON object per instance and line")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	// The target may come before the flags: weft why edge --instance a.
	if fs.NArg() > 0 && len(fs.Args()) > 1 {
		rest := fs.Args()[1:]
		target := fs.Arg(0)
		if err := parseFlags(fs, rest, stdout, stderr); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usageError(fmt.Errorf("why takes one target, got %q", append([]string{target}, fs.Args()...)))
		}
		args = []string{target}
	} else {
		args = fs.Args()
	}
	if len(args) != 1 {
		return usageError(errors.New("why takes one target: weft why <target> [--instance I]"))
	}
	target := args[0]
	nc, err := nf.connect(stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	conn, err := audit.NewConn(nc)
	if err != nil {
		return err
	}
	statuses, err := deployStatuses(ctx, conn, target, *instance)
	if err != nil {
		return err
	}
	chains, err := explain(ctx, conn, target, statuses)
	if err != nil {
		return err
	}
	var problems []string
	for i, c := range chains {
		if *asJSON {
			if err := json.NewEncoder(stdout).Encode(c); err != nil {
				return err
			}
		} else {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if err := audit.WriteChain(stdout, c); err != nil {
				return err
			}
		}
		if err := c.Err(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// deployStatuses are the deploy statuses of target's instances (only
// instance's, when it is set), or an error naming what exists.
func deployStatuses(ctx context.Context, conn audit.Conn, target, instance string) ([]msg.DeployStatus, error) {
	rep, err := readStatus(ctx, conn)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range rep.Targets {
		names = append(names, t.Target)
		if t.Target != target {
			continue
		}
		if len(t.Deploys) == 0 {
			return nil, fmt.Errorf("target %q has not been deployed to any instance yet", target)
		}
		if instance == "" {
			return t.Deploys, nil
		}
		var instances []string
		for _, d := range t.Deploys {
			if d.Instance == instance {
				return []msg.DeployStatus{d}, nil
			}
			instances = append(instances, d.Instance)
		}
		return nil, fmt.Errorf("target %q has no instance %q (instances: %s)", target, instance, strings.Join(instances, ", "))
	}
	return nil, fmt.Errorf("no target %q in weft's status (targets: %s)", target, strings.Join(names, ", "))
}

// explain reads the target's history and the changes its renders read,
// and builds the chain of each status.
func explain(ctx context.Context, conn audit.Conn, target string, statuses []msg.DeployStatus) ([]audit.Chain, error) {
	var sources []audit.Source
	for _, s := range audit.Sources(target) {
		switch s.Stream {
		case msg.StreamRenders, msg.StreamValidated, msg.StreamDeploys:
			sources = append(sources, s)
		}
	}
	events, err := history(ctx, conn, sources, time.Time{})
	if err != nil {
		return nil, err
	}
	chains := make([]audit.Chain, len(statuses))
	var start time.Time
	first := true
	for i, st := range statuses {
		chains[i] = audit.Explain(st, events)
		if chains[i].Render == nil {
			continue
		}
		from := time.Time{}
		if p := chains[i].Previous; p != nil {
			from = p.At.Add(-changeSlack)
		}
		if first || from.Before(start) {
			start, first = from, false
		}
	}
	if first {
		return chains, nil // no render to read changes for
	}
	changes, err := history(ctx, conn, []audit.Source{{Stream: msg.StreamChanges, Subject: msg.ChangeAll}}, start)
	if err != nil {
		return nil, err
	}
	for i := range chains {
		chains[i].AddChanges(changes)
	}
	return chains, nil
}

// history reads sources from start up to now.
func history(ctx context.Context, conn audit.Conn, sources []audit.Source, start time.Time) ([]audit.Event, error) {
	feed, err := audit.Open(ctx, conn, sources, start, false)
	if err != nil {
		return nil, err
	}
	defer feed.Close()
	return feed.History(ctx)
}
