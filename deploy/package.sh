#!/usr/bin/env bash
# Build the Debian packages and print their paths, one a line: first
# onceq_VERSION_ARCH.deb (what production runs), then
# onceq-testing_VERSION_ARCH.deb (onceq-chaos, onceq-test-worker,
# onceq-carrier; it depends on the first).
#
#   bash deploy/package.sh [DIR]     # DIR: the build tree, default build-deb/
#   { read -r deb; read -r testing_deb; } < <(bash deploy/package.sh)
#
# Configures DIR as a release build for the prefix /usr with Debian's
# hardening flags (dpkg-buildflags), builds it, makes the man pages
# (help2man) and packs what `cmake --install` installs with `cpack -G DEB`,
# one package per install component (deploy/package/CMakeLists.txt).
# Only the packages' paths go to stdout; the build's output goes to stderr.
# deploy/install-deps.sh installs what it needs (dpkg-dev, file, help2man).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build-deb}
mkdir -p "$build"
build=$(cd "$build" && pwd)

for tool in cmake cpack dpkg-buildflags dpkg-shlibdeps file help2man; do
  command -v "$tool" >/dev/null ||
    { echo "package: $tool is missing (bash deploy/install-deps.sh)" >&2; exit 1; }
done

# Debian's hardening (stack protector, fortify, format checks, full RELRO
# and bind-now); no -g, the package is stripped. From the top, so that
# their -ffile-prefix-map is the same wherever this is called from (a
# change of flags rebuilds everything).
export DEB_BUILD_MAINT_OPTIONS=hardening=+all DEB_CFLAGS_MAINT_STRIP=-g
cd "$top"
cflags="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)

{
  cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
    -DONCEQ_MANPAGES=ON -DONCEQ_SANITIZE=OFF \
    "-DCMAKE_C_FLAGS=$cflags" "-DCMAKE_EXE_LINKER_FLAGS=$ldflags" \
    "-DCMAKE_SHARED_LINKER_FLAGS=$ldflags"
  cmake --build "$build" --parallel "$(nproc)"
} >&2

rm -f "$build"/onceq_*.deb "$build"/onceq-testing_*.deb
(cd "$build" && cpack -G DEB) >"$build/cpack.log" 2>&1 ||
  { cat "$build/cpack.log" >&2; echo "package: cpack failed" >&2; exit 1; }
made=$(sed -n 's/^CPack: - package: \(.*\.deb\) generated\.$/\1/p' "$build/cpack.log")
for name in onceq onceq-testing; do
  deb=$(grep "/${name}_[^/]*\.deb$" <<<"$made" || true)
  [ -n "$deb" ] && [ -f "$deb" ] ||
    { cat "$build/cpack.log" >&2; echo "package: no $name .deb made" >&2; exit 1; }
  echo "$deb"
done
