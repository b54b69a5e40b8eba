#!/usr/bin/env bash
# bench.lib: tests/bench/lib.sh, sourced as the benchmark scripts source it,
# names the build directory it was given when there is none, and turns a
# relative one into an absolute path (setsid and exec take a relative
# binary path for a command name).
#
#   bash tests/bench_lib_check.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: bench_lib_check.sh SOURCE_DIR}
lib=$src/tests/bench/lib.sh
bad=0
say() { echo "bench lib: $*" >&2; bad=1; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# No such directory: the message names it, and sourcing stops the script.
missing=$tmp/no-such-build
out=$(cd "$tmp" && SCRIPT=check BUILD=$missing bash -c 'source "$1"; echo sourced' _ "$lib" 2>&1)
case $out in
*"no build directory: $missing "*) ;;
*) say "a missing build directory is not named; the message was: $out" ;;
esac
case $out in *sourced*) say "sourcing went on past a missing build directory" ;; esac

# A relative directory: resolved from the working directory.
mkdir -p "$tmp/build/bin"
out=$(cd "$tmp" && SCRIPT=check BUILD=build bash -c 'source "$1"; echo "BUILD=$BUILD"' _ "$lib" 2>&1)
case $out in
*"BUILD=$tmp/build"*) ;;
*) say "a relative build directory was not made absolute: $out" ;;
esac

exit "$bad"
