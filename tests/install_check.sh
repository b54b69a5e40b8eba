#!/usr/bin/env bash
# tests.install_paths: install the build into a temp prefix and fail if any
# installed file (binaries included, read with strings; gzipped man pages
# unpacked) contains the path of the source tree or of the build tree, or if
# the SDK is incomplete (libonceq-worker.so.0, onceq/worker.h,
# onceq-worker.pc). From the prefix, `onceq --help` and `onceq-worker --help`
# must run without LD_LIBRARY_PATH. The install holds the test tools
# (onceq-chaos, onceq-test-worker, onceq-carrier, their man pages), and an
# install of the production component alone (`--component onceq`, what the
# onceq package holds) holds none of them.
#
#   bash tests/install_check.sh SOURCE_DIR BUILD_DIR [ROOT]
#
# With ROOT, the files of a package made from BUILD_DIR (dpkg-deb -x DEB
# ROOT) are checked instead of an install: they sit under ROOT/PREFIX, the
# build's prefix (/usr), where the dynamic linker finds the libraries once
# installed, so here the binaries run with LD_LIBRARY_PATH set to them.
set -euo pipefail
src=$(cd "${1:?usage: install_check.sh SOURCE_DIR BUILD_DIR [ROOT]}" && pwd -P)
build=$(cd "${2:?usage: install_check.sh SOURCE_DIR BUILD_DIR [ROOT]}" && pwd -P)
root=${3:-}
fail() { echo "install check: $*" >&2; exit 1; }
cached() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
libdir=$(cached CMAKE_INSTALL_LIBDIR)
[ -n "$libdir" ] || fail "no CMAKE_INSTALL_LIBDIR in $build/CMakeCache.txt"

if [ -n "$root" ]; then
  prefix=$(cd "$root" && pwd -P)$(cached CMAKE_INSTALL_PREFIX)
  [ -d "$prefix" ] || fail "$prefix: no such directory"
  run_env=(env "LD_LIBRARY_PATH=$prefix/$libdir")
else
  prefix=$(mktemp -d "${TMPDIR:-/tmp}/onceq-install-XXXXXX")
  production=$(mktemp -d "${TMPDIR:-/tmp}/onceq-install-XXXXXX")
  trap 'rm -rf "$prefix" "$production"' EXIT
  cmake --install "$build" --prefix "$prefix" >/dev/null
  cmake --install "$build" --component onceq --prefix "$production" >/dev/null
  run_env=(env -u LD_LIBRARY_PATH)
  # Man pages only where the build made them (help2man).
  man=$(find "$prefix/share/man/man1" -name 'onceq-worker.1.gz' 2>/dev/null)
  for b in onceq-chaos onceq-test-worker onceq-carrier; do
    [ -e "$prefix/bin/$b" ] || fail "cmake --install did not install the test tool $b"
    [ ! -e "$production/bin/$b" ] || fail "the production component (--component onceq) installs $b, a test tool"
    [ -z "$man" ] || [ -e "$prefix/share/man/man1/$b.1.gz" ] || fail "cmake --install did not install $b(1)"
    [ ! -e "$production/share/man/man1/$b.1.gz" ] || fail "the production component installs $b(1)"
  done
  for b in onceq-broker onceq-worker onceq; do
    [ -e "$production/bin/$b" ] || fail "the production component (--component onceq) does not install $b"
  done
fi

for f in "$libdir/libonceq-worker.so.0" "$libdir/libonceq.so.0" include/onceq/worker.h \
         "$libdir/pkgconfig/onceq-worker.pc" "$libdir/pkgconfig/onceq.pc" share/onceq/pg.sh; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
# The worker SDK's header includes only installed headers.
for h in $(sed -n 's/^#include "\(onceq\/[a-z_]*\.h\)"/\1/p' "$prefix/include/onceq/worker.h"); do
  [ -e "$prefix/include/$h" ] || fail "onceq/worker.h includes $h, which is not installed"
done

# A file's text as strings sees it: gzipped files (man pages) unpacked.
text_of() {
  case "$1" in
  *.gz) gzip -dc "$1" | strings -a ;;
  *) strings -a "$1" ;;
  esac
}

bad=0
while IFS= read -r -d '' f; do
  for p in "$src" "$build"; do
    # grep reads it all: a grep -q that quit at the first match would kill
    # strings with SIGPIPE and, under pipefail, hide the match.
    if text_of "$f" | grep -F "$p" >/dev/null; then
      echo "install check: ${f#$prefix/} contains $p:" >&2
      text_of "$f" | grep -F "$p" | head -3 | sed 's/^/    /' >&2
      bad=1
    fi
  done
done < <(find "${root:-$prefix}" -type f -print0)
[ "$bad" -eq 0 ] || fail "installed files name the source or build tree"

"${run_env[@]}" "$prefix/bin/onceq-worker" --help >/dev/null ||
  fail "the installed onceq-worker does not run"
"${run_env[@]}" "$prefix/bin/onceq" --help >/dev/null ||
  fail "the installed onceq does not run"
echo "install check: $(find "${root:-$prefix}" -type f | wc -l) files, no source or build path"
