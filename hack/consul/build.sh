#!/usr/bin/env bash
# build.sh [DIR] builds the consul agent from its Go module, at the version
# this folder's go.mod pins, into DIR, and prints DIR.
#
# DIR defaults to ${WEFT_CACHE:-$HOME/.cache/weft}/consul/<version>. When DIR
# already holds a completed build of that version, nothing is built. Needs
# only Go and the module proxy (about 4 minutes on an idle machine, far
# longer on a busy one). The module proxy's checksum database refuses
# github.com/hashicorp/consul-awsauth, whose sum go.sum holds instead.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
export GONOSUMDB=${GONOSUMDB:+$GONOSUMDB,}github.com/hashicorp/consul-awsauth

version=$(go list -m -f '{{.Version}}' github.com/hashicorp/consul)
dir=${1:-${WEFT_CACHE:-$HOME/.cache/weft}/consul/$version}
want="consul $version"
bins=(consul)

# shellcheck source-path=SCRIPTDIR source=../lib/cachedbuild.sh
source "$here/../lib/cachedbuild.sh"
cached_build_start

echo "building consul $version into $dir" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/consul" github.com/hashicorp/consul
cached_build_finish
"$dir/consul" version >&2
echo "$dir"
