// Package puller pre-pulls container images onto Kubernetes nodes before a
// rollout needs them. Its parts: the API (api/v1alpha1, with the CRDs in
// deploy/k8s/crds/), node targeting (nodes), which workloads a policy
// selects and where their images are missing (workload), the per-node
// pull state machine (pull), the pull Job (job, with the static
// cmd/weft-noop), a client of the container runtime's CRI ImageService
// and the keyring of pull secrets (cri), the node agent that carries out
// a node's pull orders under the policy's limits (agent; `weft-puller
// agent`), the controller that turns policies and workloads into
// PrePullImages, orders and Jobs (controller; `weft-puller controller`),
// and the rollout gate (gate: which new pods are gated; gate/webhook: the
// admission webhook that gates them; gate/release: removing gates). The
// orders, outcomes and per-node status are msg.PullOrder, msg.Pulled and
// msg.PullStatus.
package puller
