// Package statusview prints a status report for people: one block per
// target with its last render, verdict and each instance's deploy state,
// the warnings its templates registered against resources,
// the sync state and object count of every source's types, the links to
// the hub's sites, the targets a rollback pinned, and the image pulls not
// done yet; Failing names what
// failed last and the sites the hub has not heard from.
package statusview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// Write prints rep to w.
func Write(w io.Writer, rep msg.StatusReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tRENDER\tVALIDATION\tINSTANCE\tDEPLOYED\tRELOADS\tLAST ERROR")
	if len(rep.Targets) == 0 {
		fmt.Fprintln(tw, "(none yet)\t\t\t\t\t\t")
	}
	for _, t := range rep.Targets {
		render, valid, lastErr := "-", "-", ""
		if r := t.Render; r != nil {
			render = fmt.Sprintf("v%d %s", r.Version, short(r.BundleHash))
			if r.LastError != "" {
				lastErr = "render: " + r.LastError
			}
		}
		if v := t.Validation; v != nil {
			valid = fmt.Sprintf("v%d refused", v.Version)
			if v.Undecided {
				valid = fmt.Sprintf("v%d undecided", v.Version)
			}
			if v.OK {
				valid = fmt.Sprintf("v%d ok", v.Version)
				if v.Pending != "" && v.Pending == v.BundleHash {
					// proven from its runtime values; the whole check follows
					valid = fmt.Sprintf("v%d ok (provisional; whole check of v%d pending)", v.Version, v.PendingVersion)
				}
			} else if lastErr == "" {
				lastErr = "validation: " + v.Reason
			}
		}
		if len(t.Deploys) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t%s\n", t.Target, render, valid, oneLine(lastErr))
		}
		for i, d := range t.Deploys {
			e := lastErr
			if d.LastError != "" {
				e = "deploy: " + d.LastError
			}
			name := t.Target
			if i > 0 {
				name, render, valid = "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tv%d %s\t%s\t%s\n", name, render, valid, instanceName(d), d.Version, short(d.BundleHash), reloads(d.Reloads), oneLine(e))
		}
	}
	_ = tw.Flush()
	writeWarnings(w, rep)
	writePins(w, rep)
	writeCanaries(w, rep)
	if len(rep.Syncs) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tTYPE\tSYNCED\tOBJECTS\tPROBLEMS")
		for _, s := range rep.Syncs {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\n", s.Source, s.Type, s.Synced, s.Count, oneLine(strings.Join(s.Errors, "; ")))
		}
		_ = tw.Flush()
	}
	if len(rep.Sites) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SITE\tINSTANCES\tLAG\tLINK")
		for _, st := range rep.Sites {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", st.Site, siteInstances(rep, st.Site), st.Lag, link(st, rep.At))
		}
		_ = tw.Flush()
	}
	if len(rep.Pulls) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PULLS\tNODE\tPHASE\tIMAGES\tMESSAGE")
		for _, p := range rep.Pulls {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Node, p.Phase, images(p.Images), oneLine(pullMessage(p.Images)))
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\nas of %s\n", rep.At.Format(time.RFC3339))
}

// maxWarnings bounds the warnings listed per target; --json has them all.
const maxWarnings = 20

// writeWarnings lists the errors the templates registered against
// resources (register_error) in each target's last render: the render
// went on without those resources' parts, so they are warnings, not
// failures.
func writeWarnings(w io.Writer, rep msg.StatusReport) {
	var tw *tabwriter.Writer
	for _, t := range rep.Targets {
		if t.Render == nil || len(t.Render.Errors) == 0 {
			continue
		}
		if tw == nil {
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WARNINGS\tRENDER\tRESOURCE\tMESSAGE")
		}
		for i, e := range t.Render.Errors {
			if i == maxWarnings {
				fmt.Fprintf(tw, "%s\tv%d\t\t%d more (weft status --json lists them)\n", t.Target, t.Render.Version, len(t.Render.Errors)-maxWarnings)
				break
			}
			fmt.Fprintf(tw, "%s\tv%d\t%s\t%s\n", t.Target, t.Render.Version, e.ID, oneLine(e.Message))
		}
	}
	if tw != nil {
		_ = tw.Flush()
	}
}

// writePins lists the targets a rollback holds on a bundle.
func writePins(w io.Writer, rep msg.StatusReport) {
	var pinned []msg.Pin
	for _, t := range rep.Targets {
		if t.Pin != nil {
			pinned = append(pinned, *t.Pin)
		}
	}
	if len(pinned) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PINNED\tBUNDLE\tSINCE\tBY\tREASON")
	for _, p := range pinned {
		by := p.By
		if by == "" {
			by = "-"
		}
		fmt.Fprintf(tw, "%s\tv%d %s\t%s (%s)\t%s\t%s\n", p.Target, p.Version, short(p.BundleHash),
			p.Since.Format(time.RFC3339), rep.At.Sub(p.Since).Round(time.Second), by, oneLine(p.Reason))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "(newer accepted bundles of a pinned target are not deployed until: weft unpin <target>)")
}

// writeCanaries lists the targets' canaries (deploy.canary): the bundle,
// the canary instances, the phase with the time left in the hold, and the
// verdict.
func writeCanaries(w io.Writer, rep msg.StatusReport) {
	var cs []msg.Canary
	for _, t := range rep.Targets {
		if t.Canary != nil {
			cs = append(cs, *t.Canary)
		}
	}
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CANARY	BUNDLE	INSTANCES	PHASE	PREVIOUS	VERDICT")
	for _, c := range cs {
		names := make([]string, len(c.Instances))
		for i, in := range c.Instances {
			names[i] = in.Instance
		}
		phase := c.Phase
		switch c.Phase {
		case msg.CanaryHolding:
			phase = fmt.Sprintf("holding, %s left", c.HoldLeft(rep.At).Round(time.Second))
		case msg.CanaryDeploying:
			phase = fmt.Sprintf("deploying (since %s)", rep.At.Sub(c.StartedAt).Round(time.Second))
		}
		prev := "-"
		if c.PreviousVersion != 0 {
			prev = fmt.Sprintf("v%d %s", c.PreviousVersion, short(c.PreviousHash))
		}
		verdict := "-"
		if c.Decided() {
			verdict = c.Phase
			if c.Reason != "" {
				verdict += ": " + c.Reason
			}
		}
		fmt.Fprintf(tw, "%s\tv%d %s\t%s\t%s\t%s\t%s\n", c.Target, c.Version, short(c.BundleHash), strings.Join(names, ","), phase, prev, oneLine(verdict))
	}
	_ = tw.Flush()
}

// Failing names every target whose last render, validation or deploy (of
// any instance) failed, one line each: "<target>: <stage>: <error>". Empty
// when nothing failed.
func Failing(rep msg.StatusReport) []string {
	var out []string
	for _, t := range rep.Targets {
		if r := t.Render; r != nil && r.LastError != "" {
			out = append(out, fmt.Sprintf("%s: render v%d failed: %s", t.Target, r.Version, oneLine(r.LastError)))
		}
		if v := t.Validation; v != nil && !v.OK {
			verdict := "refused"
			if v.Undecided {
				verdict = "undecided"
			}
			out = append(out, fmt.Sprintf("%s: validation of v%d %s: %s", t.Target, v.Version, verdict, oneLine(v.Reason)))
		}
		if v := t.Validation; v != nil && v.FullOnly {
			out = append(out, fmt.Sprintf("%s: a provisionally accepted bundle was refused by the whole check and rolled back to v%d; every render is checked whole until one is accepted", t.Target, v.LastFullVersion))
		}
		if c, v := t.Canary, t.Validation; c != nil && c.Phase == msg.CanaryRefused && v != nil && v.LastGoodVersion == c.Version {
			out = append(out, fmt.Sprintf("%s: canary of v%d refused: %s", t.Target, c.Version, oneLine(c.Reason)))
		}
		for _, d := range t.Deploys {
			if d.LastError != "" {
				out = append(out, fmt.Sprintf("%s: deploy to %s failed: %s", t.Target, d.Instance, oneLine(d.LastError)))
			}
		}
	}
	for _, st := range rep.Sites {
		if !st.Reachable {
			out = append(out, fmt.Sprintf("site %s: %s", st.Site, link(st, rep.At)))
		}
	}
	return out
}

// instanceName is the instance, after its site when it has one.
func instanceName(d msg.DeployStatus) string {
	if d.Site == "" {
		return d.Instance
	}
	return d.Site + "/" + d.Instance
}

// link says whether the hub hears from a site, since when not, and the
// error NATS gives for it.
func link(st msg.SiteStatus, now time.Time) string {
	var out string
	switch {
	case st.Reachable:
		return "ok"
	case st.LastHeard.IsZero():
		out = "site unreachable: not heard from since the hub's NATS started"
	default:
		out = fmt.Sprintf("site unreachable since %s (%s)", st.LastHeard.Format(time.RFC3339), now.Sub(st.LastHeard).Round(time.Second))
	}
	if st.Error != "" {
		out += ": " + oneLine(st.Error)
	}
	return out
}

// siteInstances lists the site's instances as target/instance.
func siteInstances(rep msg.StatusReport, site string) string {
	var out []string
	for _, t := range rep.Targets {
		for _, d := range t.Deploys {
			if d.Site == site {
				out = append(out, t.Target+"/"+d.Instance)
			}
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// images is "<pulled>/<all> pulled".
func images(ims []msg.ImagePull) string {
	n := 0
	for _, i := range ims {
		if i.Phase == msg.PullPulled {
			n++
		}
	}
	return fmt.Sprintf("%d/%d pulled", n, len(ims))
}

// pullMessage is the first image's message that is not Pulled, with it.
func pullMessage(ims []msg.ImagePull) string {
	for _, i := range ims {
		if i.Phase != msg.PullPulled && i.Message != "" {
			return i.Image + ": " + i.Message
		}
	}
	return ""
}

func reloads(m map[string]int64) string {
	var n int64
	for _, v := range m {
		n += v
	}
	return fmt.Sprint(n)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "-"
	}
	return h
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
