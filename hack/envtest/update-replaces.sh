#!/usr/bin/env bash
# update-replaces.sh VERSION moves this module to k8s.io/kubernetes VERSION
# (e.g. v1.36.3): every k8s.io staging module that kubernetes' go.mod requires
# at v0.0.0 is replaced with the matching v0.x release, then go.sum is tidied.
set -euo pipefail

version=${1:?usage: update-replaces.sh VERSION (e.g. v1.36.3)}
staging=v0.${version#v1.}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export GOWORK=off

gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -n $gomod ]] || { echo "k8s.io/kubernetes@$version: no go.mod" >&2; exit 1; }

go mod edit -require "k8s.io/kubernetes@$version"
for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$gomod"); do
	go mod edit -replace "$m=$m@$staging"
done
go mod tidy
