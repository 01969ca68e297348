// Package bus is how a weft service talks to NATS: Publish sends a
// versioned message with its trace context; Consume runs a handler over a
// JetStream consumer; Serve runs a handler over a core subscription.
//
// Both Consume and Serve give every message its own span (parented on the
// message's traceparent), count it by outcome, time it, and settle it from
// the handler's error with msg.Classify: permanent errors are dead-lettered
// on weft.dlq.<service> (de-duplicated across replicas by stream sequence)
// and terminated; other errors are redelivered after a delay; a handler that
// runs long has the message kept alive with InProgress. A handler that
// fails while its context is done (the process stopping) was interrupted:
// its message is redelivered at once, neither dead-lettered nor logged as
// a failure. Messages of one
// consumer are handled one at a time, in order.
package bus
