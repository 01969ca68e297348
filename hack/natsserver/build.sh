#!/usr/bin/env bash
# build.sh [DIR] builds nats-server from its Go module, at the version this
# folder's go.mod pins (the one weft embeds), into DIR, and prints DIR.
#
# DIR defaults to ${WEFT_CACHE:-$HOME/.cache/weft}/nats-server/<version>.
# When DIR already holds a completed build of that version, nothing is
# built. Needs only Go and the module proxy.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

version=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
dir=${1:-${WEFT_CACHE:-$HOME/.cache/weft}/nats-server/$version}
want="nats-server $version"
bins=(nats-server)

# shellcheck source-path=SCRIPTDIR source=../lib/cachedbuild.sh
source "$here/../lib/cachedbuild.sh"
cached_build_start

echo "building nats-server $version into $dir" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/nats-server" github.com/nats-io/nats-server/v2
cached_build_finish
"$dir/nats-server" --version >&2
echo "$dir"
