package audit

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/weftio/weft/pkg/msg"
)

// MaxChainChanges bounds the changes a Chain lists (the rest are counted).
const MaxChainChanges = 100

// Chain is why an instance runs what it runs: its deploy status, the
// outcome that brought it there and the order it carried out, the verdict
// on the bundle, the render that made it, and the object changes between
// the previous render's state revision and this one's. Problems names
// each link that could not be found (aged out of its stream).
type Chain struct {
	Target   string           `json:"target"`
	Instance string           `json:"instance"`
	Status   msg.DeployStatus `json:"status"`
	// Outcome is the first outcome that brought the instance to its
	// version, Order the order it carried out; Latest is the instance's
	// last outcome when it is another (a re-apply, a drift check).
	Outcome *Event `json:"outcome,omitempty"`
	Order   *Event `json:"order,omitempty"`
	Latest  *Event `json:"latest,omitempty"`
	Verdict *Event `json:"verdict,omitempty"`
	Render  *Event `json:"render,omitempty"`
	// Previous is the target's render before Render (its state
	// revision is where Changes start).
	Previous    *Event   `json:"previousRender,omitempty"`
	Changes     []Event  `json:"changes,omitempty"`
	ChangesMore int      `json:"changesMore,omitempty"`
	Problems    []string `json:"problems,omitempty"`
}

// ErrIncomplete reports a chain with a link missing (Chain.Problems).
var ErrIncomplete = errors.New("history incomplete")

// Explain builds the chain of st from the target's events (renders,
// verdicts, deploy orders and outcomes, in stream order). Changes are
// filled by AddChanges, once Render and Previous say which are wanted.
func Explain(st msg.DeployStatus, events []Event) Chain {
	c := Chain{Target: st.Target, Instance: st.Instance, Status: st}
	orders := map[uint64]Event{}
	var outcomes []Event
	for _, e := range events {
		switch {
		case e.Kind == KindDeploy && e.Order.Instance == st.Instance:
			orders[e.Seq] = e
		case e.Kind == KindDeployed && e.Deployed.Instance == st.Instance:
			outcomes = append(outcomes, e)
		}
	}
	for i, e := range outcomes {
		d := e.Deployed
		if d.Version != st.Version || d.BundleHash != st.BundleHash {
			continue
		}
		if d.Outcome == msg.OutcomeApplied || (c.Outcome == nil && d.Outcome == msg.OutcomeUnchanged) {
			c.Outcome = &outcomes[i]
			if d.Outcome == msg.OutcomeApplied {
				break
			}
		}
	}
	if len(outcomes) > 0 {
		last := outcomes[len(outcomes)-1]
		if c.Outcome == nil || last.Seq != c.Outcome.Seq {
			c.Latest = &last
		}
	}
	if c.Outcome != nil {
		if o, ok := orders[c.Outcome.OrderSeq]; ok {
			c.Order = &o
		} else {
			c.Problems = append(c.Problems, fmt.Sprintf("the deploy order (%s #%d) is no longer in %s", msg.DeploySubject(st.Target, st.Instance), c.Outcome.OrderSeq, msg.StreamDeploys))
		}
	} else if st.Version > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("no outcome of v%d for %s/%s is left in %s", st.Version, st.Target, st.Instance, msg.StreamDeploys))
	}
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.Kind == KindVerdict && e.Verdict.Version == st.Version && e.Verdict.BundleHash == st.BundleHash && (c.Verdict == nil || (e.Verdict.OK && !c.Verdict.Verdict.OK)) {
			c.Verdict = &events[i]
			if e.Verdict.OK {
				break
			}
		}
	}
	if c.Verdict == nil && st.Version > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("the verdict on v%d is no longer in %s", st.Version, msg.StreamValidated))
	}
	for i, e := range events {
		if e.Kind != KindRender {
			continue
		}
		r := e.Render
		if r.Version == st.Version && r.BundleHash == st.BundleHash {
			c.Render = &events[i]
		}
	}
	if c.Render == nil {
		if st.Version > 0 {
			c.Problems = append(c.Problems, fmt.Sprintf("render v%d is no longer in %s", st.Version, msg.StreamRenders))
		}
		return c
	}
	for i, e := range events {
		if e.Kind == KindRender && e.Render.Version < st.Version && e.Render.Provenance.StateRevision > 0 &&
			(c.Previous == nil || e.Render.Version > c.Previous.Render.Version) {
			c.Previous = &events[i]
		}
	}
	return c
}

// ChangeWindow is the revisions of the changes the render read that its
// previous render had not: (from, to].
func (c Chain) ChangeWindow() (from, to uint64) {
	if c.Render == nil {
		return 0, 0
	}
	if c.Previous != nil {
		from = c.Previous.Render.Provenance.StateRevision
	}
	return from, c.Render.Render.Provenance.StateRevision
}

// AddChanges keeps the change events of the chain's window, at most
// MaxChainChanges of them.
func (c *Chain) AddChanges(events []Event) {
	from, to := c.ChangeWindow()
	if to == 0 {
		return
	}
	for _, e := range events {
		if e.Kind != KindChange || e.Change.Revision <= from || e.Change.Revision > to {
			continue
		}
		if len(c.Changes) == MaxChainChanges {
			c.ChangesMore++
			continue
		}
		c.Changes = append(c.Changes, e)
	}
	if len(c.Changes) == 0 && c.Render.Render.Provenance.Cause != "" && strings.HasPrefix(c.Render.Render.Provenance.Cause, msg.Root+".change.") {
		c.Problems = append(c.Problems, fmt.Sprintf("the changes of revisions %d to %d are no longer in %s", from+1, to, msg.StreamChanges))
	}
}

// Err is ErrIncomplete, with the problems, when a link is missing.
func (c Chain) Err() error {
	if len(c.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w for %s/%s: %s", ErrIncomplete, c.Target, c.Instance, strings.Join(c.Problems, "; "))
}

// WriteChain prints c for people, from what runs back to the changes.
func WriteChain(w io.Writer, c Chain) error {
	var b strings.Builder
	line := func(depth int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", depth))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	st := c.Status
	line(0, "%s/%s runs v%d %s (driver %s), status of %s", c.Target, c.Instance, st.Version, short(st.BundleHash), orEmpty(st.Driver, "?"), st.At.UTC().Format(TimeFormat))
	if st.LastError != "" {
		line(1, "last error: %s", st.LastError)
	}
	if o := c.Outcome; o != nil {
		d := o.Deployed
		line(0, "deployed  %s: %s by %s in %s", o.At.UTC().Format(TimeFormat), d.Outcome, orEmpty(d.Driver, "?"), Duration(d.Duration))
		if c.Order != nil {
			line(1, "order #%d: %s%s", c.Order.Seq, orEmpty(c.Order.Order.Reason, "(no reason)"), trace(c.Order.TraceID))
		}
		for _, l := range DeployedDetails(d) {
			line(1, "%s", l)
		}
	}
	if l := c.Latest; l != nil {
		d := l.Deployed
		line(1, "since: %s v%d %s at %s", d.Outcome, d.Version, short(d.BundleHash), l.At.UTC().Format(TimeFormat))
	}
	if v := c.Verdict; v != nil {
		state := "accepted"
		if !v.Verdict.OK {
			state = "REFUSED: " + v.Verdict.Reason
		}
		if v.Verdict.Cached {
			state += " (cached verdict)"
		}
		line(0, "validated %s: %s", v.At.UTC().Format(TimeFormat), state)
		for _, l := range VerdictDetails(v.Verdict) {
			line(1, "%s", l)
		}
	}
	if r := c.Render; r != nil {
		p := r.Render.Provenance
		line(0, "rendered  %s: v%d %s, cause %s%s", r.At.UTC().Format(TimeFormat), r.Render.Version, short(r.Render.BundleHash), Cause(p), trace(r.TraceID))
		read := fmt.Sprintf("state rev %d", p.StateRevision)
		if cs := counts(p.Counts); cs != "" {
			read += ": " + cs
		}
		line(1, "%s", read)
		from, to := c.ChangeWindow()
		switch {
		case c.Previous != nil && from+1 >= to:
			line(0, "changes   revision %d (since v%d of %s)", to, c.Previous.Render.Version, c.Previous.At.UTC().Format(TimeFormat))
		case c.Previous != nil:
			line(0, "changes   revisions %d to %d (since v%d of %s)", from+1, to, c.Previous.Render.Version, c.Previous.At.UTC().Format(TimeFormat))
		default:
			line(0, "changes   up to revision %d (no earlier render left in %s)", to, msg.StreamRenders)
		}
		fields := map[string]msg.ObjectChange{}
		for _, oc := range p.Changed {
			fields[oc.Type+"/"+objectName(oc.Namespace, oc.Name)] = oc
		}
		for _, e := range c.Changes {
			ch := e.Change
			s := fmt.Sprintf("%s %s/%s %s %s rev %d", e.At.UTC().Format(TimeFormat), ch.Source, ch.Type, objectName(ch.Namespace, ch.Name), ch.Op, ch.Revision)
			if oc, ok := fields[ch.Type+"/"+objectName(ch.Namespace, ch.Name)]; ok && oc.Revision == ch.Revision {
				if oc.Created {
					s += ": new"
				} else if len(oc.Fields) > 0 {
					s += ": " + strings.Join(oc.Fields, ", ")
					if oc.FieldsMore > 0 {
						s += fmt.Sprintf(" and %d more", oc.FieldsMore)
					}
				}
			}
			line(1, "%s%s", s, trace(e.TraceID))
		}
		if c.ChangesMore > 0 {
			line(1, "and %d more changes", c.ChangesMore)
		}
		if len(c.Changes) == 0 {
			line(1, "none (cause %s)", Cause(p))
		}
	}
	for _, p := range c.Problems {
		line(0, "missing   %s", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func trace(id string) string {
	if id == "" {
		return ""
	}
	return " [trace " + id + "]"
}
