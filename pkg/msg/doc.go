// Package msg is weft's message contract: every subject, stream, key-value
// bucket, object store, header name and message type that the services
// exchange is defined here and nowhere else.
//
// The contract:
//
//   - Every message is a JSON object whose "schema" field names its type and
//     major version ("weft.change.v1"). Decode rejects a payload that is too
//     large, not JSON, of another type, of an unknown major version, or that
//     fails the type's own Validate, each with a typed error (see errors.go).
//     Fields added within a major version are ignored by older readers.
//   - Publishers set Nats-Msg-Id where a replica could publish the same fact
//     twice, so JetStream de-duplicates it, and carry the W3C traceparent
//     header so one trace follows a change from watch to deploy.
//   - Consumers map a handler's error to an ack decision with Classify:
//     permanent errors are terminated and dead-lettered, transient ones are
//     redelivered after a delay. Handlers are level-based: they re-read state
//     by key and revision, so redelivery and duplicates change nothing.
//   - Who may do what on NATS is one table, Accesses: per role, the
//     subjects it publishes, subscribes to, answers and asks, the durable
//     consumers it takes messages from, the bucket keys it writes and the
//     stores it reads; the NATS permissions of each role's user are
//     generated from it (Access.Permissions).
//
// The package depends on nats.go and the standard library only, so any
// program (or person with the NATS CLI) can speak the contract cheaply.
package msg
