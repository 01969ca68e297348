// Package k8s holds weft's Kubernetes manifests (kustomize: base,
// overlays/single, overlays/ingress, and the optional components
// monitoring and gate) and the tests that keep them deployable: every
// overlay builds with the kustomize API, every object it holds is accepted
// by a real kube-apiserver (server-side dry run), every pod meets the
// security settings weft promises, and each service's ServiceAccount can
// do what the service needs and is refused a sample of what it must not.
// The package has no code of its own.
package k8s
