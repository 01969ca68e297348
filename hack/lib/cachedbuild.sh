# shellcheck shell=bash disable=SC2154 # dir, want and bins are the caller's
# cachedbuild.sh, sourced by the hack/*/build.sh scripts: binaries built
# once per machine into a cache folder, and found there afterwards.
#
# The caller sets
#   dir   the folder the binaries go to
#   want  the stamp of a build: what is built, at which versions
#   bins  the binaries (an array) a complete build leaves in dir
# and calls cached_build_start. When dir already holds a complete build
# (its .built stamp is want and every binary is there), that prints dir
# and exits. Otherwise it takes dir's lock (one build at a time per
# folder: a second caller waits, then finds the build in place), makes
# the temporary folder $tmp (removed on exit) and returns; the caller
# builds bins into $tmp and calls cached_build_finish, which moves them
# into dir and writes the stamp last.

cached_build_complete() {
	[[ -f $dir/.built && "$(cat "$dir/.built")" == "$want" ]] || return 1
	local b
	for b in "${bins[@]}"; do
		[[ -x $dir/$b ]] || return 1
	done
}

cached_build_start() {
	if cached_build_complete; then
		echo "$dir"
		exit 0
	fi
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	if command -v flock >/dev/null; then
		flock 9
	fi
	if cached_build_complete; then
		echo "$dir"
		exit 0
	fi
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	build_started=$SECONDS
}

cached_build_finish() {
	local b
	for b in "${bins[@]}"; do
		mv -f "$tmp/$b" "$dir/$b"
	done
	echo "$want" >"$dir/.built"
	echo "built in $((SECONDS - build_started))s" >&2
}
