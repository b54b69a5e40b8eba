#!/usr/bin/env bash
# tests.install_paths: install the build into a temp prefix and fail if any
# installed file (binaries included, read with strings) contains the path
# of the source tree or of the build tree, or if the SDK is incomplete
# (libonceq-worker.so.0, onceq/worker.h, onceq-worker.pc). From the prefix,
# `onceq --help` and `onceq-worker --help` must run without LD_LIBRARY_PATH.
#
#   bash tests/install_check.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "${1:?usage: install_check.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
build=$(cd "${2:?usage: install_check.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
prefix=$(mktemp -d "${TMPDIR:-/tmp}/onceq-install-XXXXXX")
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install check: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null

for f in lib/libonceq-worker.so.0 lib/libonceq.so.0 include/onceq/worker.h \
         lib/pkgconfig/onceq-worker.pc lib/pkgconfig/onceq.pc share/onceq/pg.sh; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
# The worker SDK's header includes only installed headers.
for h in $(sed -n 's/^#include "\(onceq\/[a-z_]*\.h\)"/\1/p' "$prefix/include/onceq/worker.h"); do
  [ -e "$prefix/include/$h" ] || fail "onceq/worker.h includes $h, which is not installed"
done

bad=0
while IFS= read -r -d '' f; do
  for p in "$src" "$build"; do
    if strings -a "$f" | grep -qF "$p"; then
      echo "install check: ${f#$prefix/} contains $p:" >&2
      strings -a "$f" | grep -F "$p" | head -3 | sed 's/^/    /' >&2
      bad=1
    fi
  done
done < <(find "$prefix" -type f -print0)
[ "$bad" -eq 0 ] || fail "installed files name the source or build tree"

env -u LD_LIBRARY_PATH "$prefix/bin/onceq-worker" --help >/dev/null ||
  fail "the installed onceq-worker does not run"
env -u LD_LIBRARY_PATH "$prefix/bin/onceq" --help >/dev/null ||
  fail "the installed onceq does not run"
echo "install check: $(find "$prefix" -type f | wc -l) files, no source or build path"
