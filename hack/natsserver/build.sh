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
stamp="$dir/.built"
want="nats-server $version"

complete() {
	[[ -f $stamp && "$(cat "$stamp")" == "$want" && -x $dir/nats-server ]]
}

if complete; then
	echo "$dir"
	exit 0
fi

mkdir -p "$dir"
# One build at a time per DIR: a second caller waits and then finds the
# binary in place.
exec 9>"$dir/.lock"
if command -v flock >/dev/null; then
	flock 9
fi
if complete; then
	echo "$dir"
	exit 0
fi

tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "building nats-server $version into $dir" >&2
start=$SECONDS
go build -trimpath -ldflags "-s -w" -o "$tmp/nats-server" github.com/nats-io/nats-server/v2
mv -f "$tmp/nats-server" "$dir/nats-server"
echo "$want" >"$stamp"
echo "built in $((SECONDS - start))s" >&2
"$dir/nats-server" --version >&2
echo "$dir"
