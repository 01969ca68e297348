// Package audit reads what weft did from its streams, as one timeline:
// resource changes and sync markers (WEFT_CHANGES), renders
// (WEFT_RENDERS), verdicts (WEFT_VALIDATED), deploy orders and outcomes
// (WEFT_DEPLOYS), dead letters (WEFT_DLQ) and, while following, the
// triggers sent (core subjects, which no stream keeps). It only reads:
// ordered push consumers of generated names, deleted when done, so the
// auditor's NATS role suffices and nothing is left on the server.
//
// Event is the unit of the timeline, printed for people by Write and for
// machines as one JSON object per line; Filter selects what concerns one
// target; Explain walks back from what an instance runs to the changes
// that made it (`weft why`).
package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
)

// Kind is what an Event records.
type Kind string

// The kinds of events, in the order events of the same instant are listed.
const (
	KindChange     Kind = "change"     // a resource upsert or delete (msg.Change)
	KindSync       Kind = "sync"       // a source's type listed (msg.Sync)
	KindTrigger    Kind = "trigger"    // a render, resync or deploy was asked for (msg.Trigger)
	KindRender     Kind = "render"     // a render: a bundle or a failure (msg.Render)
	KindVerdict    Kind = "verdict"    // the gathered verdict on a bundle (msg.Validated)
	KindDeploy     Kind = "deploy"     // a deploy order for one instance (msg.DeployOrder)
	KindDeployed   Kind = "deployed"   // the outcome of a deploy order (msg.Deployed)
	KindDeadLetter Kind = "dlq"        // a message a service gave up on (msg.DeadLetter)
	KindUnreadable Kind = "unreadable" // a message on a weft subject that does not decode
)

var kindOrder = map[Kind]int{KindChange: 0, KindSync: 1, KindTrigger: 2, KindRender: 3, KindVerdict: 4, KindDeploy: 5, KindDeployed: 6, KindDeadLetter: 7, KindUnreadable: 8}

// Trigger is a trigger seen on its core subject.
type Trigger struct {
	// What: render, resync or deploy; Name: the target, or the source
	// of a resync.
	What   string `json:"what"`
	Name   string `json:"name"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// Event is one message of the timeline. Exactly one of the payload fields
// is set, after its Kind (none for KindUnreadable, which says why in
// Error). The JSON field names are stable.
type Event struct {
	// At is when the stream stored the message (a trigger: when it was
	// seen).
	At      time.Time `json:"at"`
	Kind    Kind      `json:"kind"`
	Subject string    `json:"subject"`
	// Stream and Seq locate the message (empty for a trigger).
	Stream string `json:"stream,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	// TraceID is the W3C trace id of the message's traceparent header.
	TraceID string `json:"traceId,omitempty"`

	Change     *msg.Change      `json:"change,omitempty"`
	Sync       *msg.Sync        `json:"sync,omitempty"`
	Trigger    *Trigger         `json:"trigger,omitempty"`
	Render     *msg.Render      `json:"render,omitempty"`
	Verdict    *msg.Validated   `json:"verdict,omitempty"`
	Order      *msg.DeployOrder `json:"order,omitempty"`
	Deployed   *msg.Deployed    `json:"deployed,omitempty"`
	DeadLetter *msg.DeadLetter  `json:"deadLetter,omitempty"`
	// OrderSeq, on a deployed event, is the stream sequence of the order
	// it is the outcome of (from its message id).
	OrderSeq uint64 `json:"orderSeq,omitempty"`
	// Error says why a message is unreadable.
	Error string `json:"error,omitempty"`
}

// TraceID returns the trace id of a W3C traceparent header
// ("00-<trace id>-<span id>-<flags>"), or "".
func TraceID(h nats.Header) string {
	parts := strings.Split(h.Get(msg.HeaderTraceParent), "-")
	if len(parts) != 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0") == "" {
		return ""
	}
	return parts[1]
}

// Decode makes the event of one message. A message that does not decode
// is an event all the same (KindUnreadable): nothing is left out.
func Decode(subject, stream string, seq uint64, at time.Time, h nats.Header, data []byte) Event {
	e := Event{At: at.UTC(), Subject: subject, Stream: stream, Seq: seq, TraceID: TraceID(h)}
	var err error
	switch msg.SubjectToken(subject, 1) {
	case "change":
		e.Kind, e.Change = KindChange, &msg.Change{}
		err = msg.Decode(data, e.Change)
	case "sync":
		e.Kind, e.Sync = KindSync, &msg.Sync{}
		err = msg.Decode(data, e.Sync)
	case "render":
		e.Kind, e.Render = KindRender, &msg.Render{}
		err = msg.Decode(data, e.Render)
	case "validated":
		e.Kind, e.Verdict = KindVerdict, &msg.Validated{}
		err = msg.Decode(data, e.Verdict)
	case "deploy":
		e.Kind, e.Order = KindDeploy, &msg.DeployOrder{}
		err = msg.Decode(data, e.Order)
	case "deployed":
		e.Kind, e.Deployed = KindDeployed, &msg.Deployed{}
		if err = msg.Decode(data, e.Deployed); err == nil {
			e.OrderSeq = orderSeq(h.Get(msg.HeaderMsgID))
		}
	case "dlq":
		e.Kind, e.DeadLetter = KindDeadLetter, &msg.DeadLetter{}
		if err = msg.Decode(data, e.DeadLetter); err == nil {
			e.DeadLetter.Payload = nil // its size stays; the stream keeps it
		}
	case "trigger":
		var t msg.Trigger
		if t, err = msg.DecodeTrigger(data); err == nil {
			e.Kind = KindTrigger
			e.Trigger = &Trigger{What: msg.SubjectToken(subject, 2), Name: msg.SubjectToken(subject, 3), Reason: t.Reason, By: t.By}
		}
	default:
		err = fmt.Errorf("not a subject of weft's streams")
	}
	if err != nil {
		return Event{At: e.At, Kind: KindUnreadable, Subject: subject, Stream: stream, Seq: seq, TraceID: e.TraceID, Error: err.Error()}
	}
	return e
}

// orderSeq is the order sequence in a deployed message id
// (msg.DeployedID: "<target>.<instance>#<sequence>"), or 0.
func orderSeq(id string) uint64 {
	i := strings.LastIndexByte(id, '#')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Before orders events by time, then by kind (a change before the render
// it causes when both have the same instant), then by stream sequence.
func Before(a, b Event) bool {
	if !a.At.Equal(b.At) {
		return a.At.Before(b.At)
	}
	if kindOrder[a.Kind] != kindOrder[b.Kind] {
		return kindOrder[a.Kind] < kindOrder[b.Kind]
	}
	return a.Seq < b.Seq
}

// Filter selects the events that concern one target.
type Filter struct {
	// Target: "" selects everything.
	Target string
	// Types are the watched types the target's renders read (the
	// configuration's); nil: every change concerns it.
	Types map[string]bool
}

// Match reports whether e concerns the filter's target.
func (f Filter) Match(e Event) bool {
	if f.Target == "" {
		return true
	}
	switch e.Kind {
	case KindChange:
		return f.typeMatch(e.Change.Type)
	case KindSync:
		return f.typeMatch(e.Sync.Type)
	case KindRender:
		return e.Render.Target == f.Target
	case KindVerdict:
		return e.Verdict.Target == f.Target
	case KindDeploy:
		return e.Order.Target == f.Target
	case KindDeployed:
		return e.Deployed.Target == f.Target
	case KindDeadLetter:
		return f.subjectMatch(e.DeadLetter.Subject)
	}
	return f.subjectMatch(e.Subject)
}

func (f Filter) typeMatch(typ string) bool { return f.Types == nil || f.Types[typ] }

// subjectMatch reports whether a message on subject concerns the target:
// it names it, or it is a change of a type the target reads, or a resync
// of a source (which may change anything).
func (f Filter) subjectMatch(subject string) bool {
	tok := func(i int) string { return msg.SubjectToken(subject, i) }
	switch tok(1) {
	case "change", "sync":
		return f.typeMatch(tok(3))
	case "render", "validate", "validated", "deploy", "deployed":
		return tok(2) == f.Target
	case "trigger":
		return tok(2) == "resync" || tok(3) == f.Target
	}
	return false
}
