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
stamp="$dir/.built"
want="consul $version"

complete() {
	[[ -f $stamp && "$(cat "$stamp")" == "$want" && -x $dir/consul ]]
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

echo "building consul $version into $dir" >&2
start=$SECONDS
go build -trimpath -ldflags "-s -w" -o "$tmp/consul" github.com/hashicorp/consul
mv -f "$tmp/consul" "$dir/consul"
echo "$want" >"$stamp"
echo "built in $((SECONDS - start))s" >&2
"$dir/consul" version >&2
echo "$dir"
