package msg

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header names.
const (
	HeaderMsgID       = jetstream.MsgIDHeader // "Nats-Msg-Id": JetStream de-duplication
	HeaderSchema      = "Weft-Schema"         // the schema string of the payload
	HeaderTraceParent = "traceparent"         // W3C trace context
	HeaderTraceState  = "tracestate"
	HeaderReason      = "Weft-Reason" // DLQ: why the message was dead-lettered
	// HeaderInitial marks a resource write made by a source's first listing.
	HeaderInitial = "Weft-Initial"

	// HeaderExpectedLastSubjectSeq makes a stream write conditional on the
	// subject's last sequence (0: no message yet): compare-and-set.
	HeaderExpectedLastSubjectSeq = jetstream.ExpectedLastSubjSeqHeader
	// HeaderKVOperation marks key-value delete and purge markers.
	HeaderKVOperation = "KV-Operation"
	KVOpDelete        = "DEL"
	KVOpPurge         = "PURGE"
)

// Carrier adapts NATS headers to the OpenTelemetry TextMapCarrier shape
// (Get, Set, Keys), so trace context travels in message headers without this
// package importing OpenTelemetry.
type Carrier nats.Header

// Get returns the first value of key.
func (c Carrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces the values of key.
func (c Carrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// NewMsg builds a NATS message for subject with the encoded payload of m, its
// schema header and, when id is not empty, a Nats-Msg-Id for de-duplication.
func NewMsg[T Message](subject, id string, m T) (*nats.Msg, error) {
	data, err := Encode(m)
	if err != nil {
		return nil, err
	}
	out := nats.NewMsg(subject)
	out.Data = data
	out.Header.Set(HeaderSchema, m.Schema())
	if id != "" {
		out.Header.Set(HeaderMsgID, id)
	}
	return out, nil
}
