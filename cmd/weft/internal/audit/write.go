package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// TimeFormat is how Write prints an event's time: UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// indent starts the detail lines under an event's line.
const indent = "    "

// Write prints e for people: one line (time, kind, what) and, indented
// under it, its details (objects changed, each validator kind's answer,
// runtime operations, errors).
func Write(w io.Writer, e Event) error {
	head, details := describe(e)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-10s %s\n", e.At.UTC().Format(TimeFormat), e.Kind, head)
	for _, d := range details {
		b.WriteString(indent + d + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints e as one JSON object on one line.
func WriteJSON(w io.Writer, e Event) error {
	return json.NewEncoder(w).Encode(e)
}

func describe(e Event) (string, []string) {
	switch e.Kind {
	case KindChange:
		return describeChange(e.Change), nil
	case KindSync:
		s := e.Sync
		return fmt.Sprintf("%s/%s listed: %d objects, rev %d", s.Source, s.Type, s.Count, s.Revision), prefixed("error: ", s.Errors)
	case KindTrigger:
		return describeTrigger(e.Trigger), nil
	case KindRender:
		return describeRender(e.Render)
	case KindVerdict:
		return describeVerdict(e.Verdict)
	case KindDeploy:
		o := e.Order
		return fmt.Sprintf("%s/%s v%d %s, order %s", o.Target, o.Instance, o.Version, short(o.BundleHash), orEmpty(o.Reason, "(no reason)")), nil
	case KindDeployed:
		return describeDeployed(e.Deployed)
	case KindDeadLetter:
		d := e.DeadLetter
		where := d.Subject
		if d.Stream != "" {
			where += fmt.Sprintf(" (%s #%d)", d.Stream, d.Sequence)
		}
		return fmt.Sprintf("%s gave up on %s: %s", d.Service, where, d.Reason), nil
	}
	where := e.Subject
	if e.Stream != "" {
		where += fmt.Sprintf(" (%s #%d)", e.Stream, e.Seq)
	}
	return where + ": " + e.Error, nil
}

func describeChange(c *msg.Change) string {
	s := fmt.Sprintf("%s/%s %s %s rev %d", c.Source, c.Type, objectName(c.Namespace, c.Name), c.Op, c.Revision)
	if c.Initial {
		s += " (initial listing)"
	}
	return s
}

func describeTrigger(t *Trigger) string {
	s := t.What + " " + t.Name
	if said := triggerSays(t.Reason, t.By); said != "" {
		s += " (" + said + ")"
	}
	return s
}

// triggerSays is what a trigger says of itself: "reason, by who".
func triggerSays(reason, by string) string {
	var parts []string
	if reason != "" {
		parts = append(parts, reason)
	}
	if by != "" {
		parts = append(parts, "by "+by)
	}
	return strings.Join(parts, ", ")
}

func describeRender(r *msg.Render) (string, []string) {
	p := r.Provenance
	from := fmt.Sprintf("cause %s, state rev %d", Cause(p), p.StateRevision)
	if c := counts(p.Counts); c != "" {
		from += " (" + c + ")"
	}
	var head string
	if r.Failure != nil {
		head = fmt.Sprintf("%s v%d FAILED: %s; %s", r.Target, r.Version, templateError(r.Failure), from)
	} else {
		files := "files"
		if len(r.Files) == 1 {
			files = "file"
		}
		head = fmt.Sprintf("%s v%d %s, %d %s, %s", r.Target, r.Version, short(r.BundleHash), len(r.Files), files, from)
	}
	var details []string
	for _, c := range p.Changed {
		details = append(details, "changed "+ObjectChangeText(c))
	}
	if p.ChangedMore > 0 {
		details = append(details, fmt.Sprintf("changed %d more objects", p.ChangedMore))
	}
	for _, e := range r.Errors {
		details = append(details, fmt.Sprintf("resource error %s %s: %s", e.Type, e.ID, e.Message))
	}
	return head, details
}

// Cause is what made a render: the change subject, or the reason, and for
// a trigger what it said of itself.
func Cause(p msg.Provenance) string {
	c := orEmpty(p.Cause, "unknown")
	if t := p.Trigger; t != nil {
		if said := triggerSays(t.Reason, t.By); said != "" {
			c += " (" + said + ")"
		}
	}
	return c
}

// ObjectChangeText is one changed object of a provenance: type,
// namespace/name, op, revision and the fields that differ.
func ObjectChangeText(c msg.ObjectChange) string {
	s := fmt.Sprintf("%s %s %s rev %d", c.Type, objectName(c.Namespace, c.Name), c.Op, c.Revision)
	switch {
	case c.Created:
		s += ": new"
	case len(c.Fields) > 0:
		s += ": " + strings.Join(c.Fields, ", ")
		if c.FieldsMore > 0 {
			s += fmt.Sprintf(" and %d more", c.FieldsMore)
		}
	}
	return s
}

func templateError(t *msg.TemplateError) string {
	if t.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", t.Template, t.Line, t.Message)
	}
	if t.Template != "" {
		return t.Template + ": " + t.Message
	}
	return t.Message
}

func describeVerdict(v *msg.Validated) (string, []string) {
	var head string
	if v.OK {
		head = fmt.Sprintf("%s v%d %s OK", v.Target, v.Version, short(v.BundleHash))
	} else {
		head = fmt.Sprintf("%s v%d %s REFUSED: %s", v.Target, v.Version, short(v.BundleHash), v.Reason)
	}
	if v.Cached {
		head += " (cached verdict)"
	}
	return head, VerdictDetails(v)
}

// VerdictDetails are a verdict's lines: each kind's answer with its
// duration and problems, and the kinds that did not answer.
func VerdictDetails(v *msg.Validated) []string {
	var out []string
	for _, r := range v.Replies {
		state := "accepted"
		switch {
		case r.Error != "":
			state = "could not decide (" + r.Error + ")"
		case !r.OK:
			state = "refused"
		}
		out = append(out, fmt.Sprintf("%s %s in %s", r.Kind, state, Duration(r.Duration)))
		for _, p := range r.Problems {
			out = append(out, "  "+problem(p))
		}
	}
	if len(v.Missing) > 0 {
		out = append(out, "missing: "+strings.Join(v.Missing, ", "))
	}
	return out
}

func problem(p msg.Problem) string {
	s := p.Message
	if p.File != "" {
		loc := p.File
		if p.Line > 0 {
			loc += fmt.Sprint(":", p.Line)
		}
		s = loc + ": " + s
	}
	if p.Severity == "warning" {
		s = "warning: " + s
	}
	return s
}

func describeDeployed(d *msg.Deployed) (string, []string) {
	head := fmt.Sprintf("%s/%s v%d %s %s by %s in %s", d.Target, d.Instance, d.Version, short(d.BundleHash), d.Outcome, orEmpty(d.Driver, "?"), Duration(d.Duration))
	return head, DeployedDetails(d)
}

// DeployedDetails are an outcome's lines: the reload or runtime
// operations, files written and removed, the error.
func DeployedDetails(d *msg.Deployed) []string {
	var out []string
	switch {
	case d.Reloaded:
		out = append(out, "reloaded: "+orEmpty(d.ReloadReason, "(no reason given)"))
	case d.Outcome == msg.OutcomeApplied:
		out = append(out, "no reload")
	}
	for _, op := range d.RuntimeOps {
		out = append(out, "runtime: "+op)
	}
	if len(d.Written) > 0 {
		out = append(out, "written: "+strings.Join(d.Written, ", "))
	}
	if len(d.Removed) > 0 {
		out = append(out, "removed: "+strings.Join(d.Removed, ", "))
	}
	if d.Error != "" {
		s := "error: " + d.Error
		if d.Attempt > 0 {
			s += fmt.Sprintf(" (attempt %d)", d.Attempt)
		}
		out = append(out, s)
	}
	return out
}

func counts(c map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

func objectName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return orEmpty(hash, "-")
}

func orEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func prefixed(p string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = p + l
	}
	return out
}

// Duration prints d rounded for people: milliseconds from 1ms up,
// microseconds below.
func Duration(d time.Duration) string {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}
