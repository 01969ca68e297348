// Package puller pre-pulls container images onto Kubernetes nodes before a
// rollout needs them. Its parts so far: the API (api/v1alpha1, with the
// CRDs in deploy/k8s/crds/), node targeting (nodes), the pull Job (job,
// with the static cmd/weft-noop), a client of the container runtime's CRI
// ImageService and the keyring of pull secrets (cri), and the node agent
// that carries out a node's pull orders (agent; `weft-puller agent`), and
// the rollout gate (gate: which new pods are gated; gate/webhook: the
// admission webhook that gates them; gate/release: removing gates). The
// orders, outcomes and per-node status are msg.PullOrder, msg.Pulled and
// msg.PullStatus. The controller that turns policies and workloads into
// orders and Jobs is not part of the module yet, and `weft up` does not
// start the puller.
package puller
