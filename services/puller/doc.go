// Package puller pre-pulls container images onto Kubernetes nodes before a
// rollout needs them. Its parts: package cri (a client of the container
// runtime's CRI ImageService and the keyring of pull secrets), package
// agent (the node agent that carries out a node's pull orders) and the
// weft-puller command (`weft-puller agent`). The orders, outcomes and
// per-node status are msg.PullOrder, msg.Pulled and msg.PullStatus. The
// controller that turns policies and workloads into orders is not part of
// the module yet, and `weft up` does not start the puller.
package puller
