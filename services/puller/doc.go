// Package puller will pre-pull container images onto Kubernetes nodes
// before a rollout needs them (PrePullPolicy and PrePullImage resources,
// one Job per node within cluster-wide and per-node limits held in NATS KV).
// Its parts so far: the API (api/v1alpha1, with the CRDs in
// deploy/k8s/crds/), node targeting (nodes) and the pull Job (job, with
// cmd/weft-noop); `weft up` does not start the puller yet.
package puller
