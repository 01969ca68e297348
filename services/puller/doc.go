// Package puller will pre-pull container images onto Kubernetes nodes
// before a rollout needs them (PrePullPolicy and PrePullImage resources,
// one Job per node within cluster-wide and per-node limits held in NATS KV).
// The module exists so that the service has its place in the workspace; it
// has no behaviour yet and `weft up` does not start it.
package puller
