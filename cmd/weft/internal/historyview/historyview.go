// Package historyview prints the answers of the history API for people:
// a target's kept bundles with their verdicts, where they ran and what
// holds them now (History), and the unified diff of two bundles (Diff).
package historyview

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// History prints h to w: the pin, the retention, then one line per
// bundle, newest first.
func History(w io.Writer, h msg.HistoryReply) {
	if p := h.Pin; p != nil {
		fmt.Fprintf(w, "%s is pinned on v%d (%s) since %s", h.Target, p.Version, short(p.BundleHash), p.Since.Format(time.RFC3339))
		if p.By != "" {
			fmt.Fprintf(w, " by %s", p.By)
		}
		if p.Reason != "" {
			fmt.Fprintf(w, ": %s", oneLine(p.Reason))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%s keeps its last %d bundles for %s (and any bundle running, pinned or last accepted)\n\n", h.Target, h.Keep, h.MaxAge)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tBUNDLE\tRENDERED\tVERDICT\tRAN ON\tNOW")
	if len(h.Entries) == 0 {
		fmt.Fprintln(tw, "(none yet)\t\t\t\t\t")
	}
	for _, e := range h.Entries {
		verdict := "ok"
		if !e.OK {
			verdict = "refused: " + oneLine(e.Reason)
		}
		fmt.Fprintf(tw, "v%d\t%s\t%s\t%s\t%s\t%s\n", e.Version, short(e.BundleHash), when(e.RenderedAt), verdict, ranOn(e), now(h, e))
	}
	_ = tw.Flush()
}

// ranOn lists the instances that ran a bundle, each with when it first
// did.
func ranOn(e msg.HistoryEntry) string {
	if len(e.Deployed) == 0 {
		return "-"
	}
	var out []string
	for _, d := range e.Deployed {
		name := d.Instance
		if d.Site != "" {
			name = d.Site + "/" + name
		}
		out = append(out, name+" "+when(d.At))
	}
	return strings.Join(out, ", ")
}

// now says what holds a bundle today: the pin, the last accepted verdict,
// the instances running it.
func now(h msg.HistoryReply, e msg.HistoryEntry) string {
	var out []string
	if h.Pin != nil && h.Pin.Version == e.Version {
		out = append(out, "pinned")
	}
	if h.LastGood == e.Version && e.OK {
		out = append(out, "last accepted")
	}
	var running []string
	for in, v := range h.Running {
		if v == e.Version {
			running = append(running, in)
		}
	}
	if len(running) > 0 {
		slices.Sort(running)
		out = append(out, "running on "+strings.Join(running, ", "))
	}
	return strings.Join(out, "; ")
}

// Diff prints d to w: a line naming both bundles, then each changed
// file's unified diff.
func Diff(w io.Writer, d msg.DiffReply) {
	fmt.Fprintf(w, "# %s v%d (%s) -> v%d (%s): %s\n", d.Target, d.FromVersion, short(d.FromHash), d.ToVersion, short(d.ToHash), changes(d.Files))
	for _, f := range d.Files {
		fmt.Fprintf(w, "# %s %s\n", f.Path, f.Change)
		fmt.Fprint(w, f.Unified)
	}
}

func changes(files []msg.FileDiff) string {
	if len(files) == 0 {
		return "no file differs"
	}
	n := map[string]int{}
	for _, f := range files {
		n[f.Change]++
	}
	var out []string
	for _, c := range []string{msg.FileChanged, msg.FileAdded, msg.FileRemoved} {
		if n[c] > 0 {
			out = append(out, fmt.Sprintf("%d %s", n[c], c))
		}
	}
	return strings.Join(out, ", ")
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
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

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
