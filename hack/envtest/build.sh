#!/usr/bin/env bash
# build.sh [DIR] builds the Kubernetes control plane that weft's tests run
# against (kube-apiserver, etcd, kube-controller-manager) from their Go
# modules, pinned in this folder's go.mod, into DIR, and prints DIR.
#
# DIR defaults to ${WEFT_CACHE:-$HOME/.cache/weft}/envtest/<kubernetes version>.
# When DIR already holds all three binaries from a completed build, nothing is
# built. Needs only Go and the module proxy; a cold build takes a few minutes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
dir=${1:-${WEFT_CACHE:-$HOME/.cache/weft}/envtest/$kube_version}
want="kube-apiserver $kube_version etcd $etcd_version kube-controller-manager $kube_version"
bins=(kube-apiserver etcd kube-controller-manager)

# shellcheck source-path=SCRIPTDIR source=../lib/cachedbuild.sh
source "$here/../lib/cachedbuild.sh"
cached_build_start

minor=${kube_version#v1.}
minor=${minor%%.*}
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$kube_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

echo "building kube-apiserver, kube-controller-manager $kube_version and etcd $etcd_version into $dir" >&2
# One go build for all three shares the compilation of their common packages.
go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	go.etcd.io/etcd/server/v3
# go names the etcd binary after its package path's last element.
mv "$tmp/server" "$tmp/etcd"
cached_build_finish
"$dir/kube-apiserver" --version >&2
echo "$dir"
