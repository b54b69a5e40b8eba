#!/usr/bin/env bash
# package.units: the systemd units as installed start the installed
# binaries, carry the settings the deployment relies on, and pass
# `systemd-analyze verify` with nothing to say.
#
# The build is installed into a staging directory (DESTDIR); each unit's
# ExecStart must name a binary of the install (PREFIX/bin), and a copy of
# the unit with PREFIX moved into the staging directory is verified, so that
# systemd-analyze checks the real binary. tests/package_test.sh verifies
# the units of an installed package as they are.
#
#   bash tests/units_check.sh SOURCE_DIR BUILD_DIR
#
# Exit 77 (ctest: skipped) where systemd-analyze is missing, unless CI=true:
# there it must run.
set -euo pipefail
src=$(cd "${1:?usage: units_check.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
build=$(cd "${2:?usage: units_check.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
fail() { echo "units check: FAIL: $*" >&2; exit 1; }

if ! command -v systemd-analyze >/dev/null; then
  echo "units check: cannot run: systemd-analyze is missing (apt-get install systemd, or bash deploy/install-deps.sh)" >&2
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi

prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:[A-Z]*=//p' "$build/CMakeCache.txt")
[ -n "$prefix" ] || fail "no CMAKE_INSTALL_PREFIX in $build/CMakeCache.txt"
work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-units-XXXXXX")
trap 'rm -rf "$work"' EXIT
DESTDIR=$work/stage cmake --install "$build" >/dev/null
stage=$work/stage
unit_dir=$stage$prefix/lib/systemd/system
mkdir "$work/verify"

# The worker's drain: systemd must wait longer than the supervisor gives
# its workers (onceq-worker --help, --stop-timeout) before it SIGKILLs.
stop_timeout=$("$build/bin/onceq-worker" --help | tr '\n' ' ' |
  sed -n 's/.*ONCEQ_WORKER_STOP_TIMEOUT\] *(default \([0-9]*\)).*/\1/p')
[ -n "$stop_timeout" ] || fail "onceq-worker --help shows no default for --stop-timeout"

for unit in onceq-broker.service onceq-worker@.service onceq-web.service; do
  file=$unit_dir/$unit
  [ -f "$file" ] || fail "$unit is not installed in $prefix/lib/systemd/system"
  exec_start=$(sed -n 's/^ExecStart=//p' "$file")
  binary=${exec_start%% *}
  case "$binary" in
  "$prefix/bin/"*) ;;
  *) fail "$unit starts $binary, not a binary of the install ($prefix/bin)" ;;
  esac
  [ -x "$stage$binary" ] || fail "$unit starts $binary, which the install does not have"
  for setting in User=onceq Group=onceq NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
                 PrivateTmp=yes LimitNOFILE=65536 Restart=on-failure KillSignal=SIGTERM; do
    grep -qx "$setting" "$file" || fail "$unit lacks $setting"
  done
  grep -q '^EnvironmentFile=-/' "$file" || fail "$unit reads no optional EnvironmentFile"
  if grep -q "$src\|$build" "$file"; then fail "$unit names the source or build tree"; fi
  sed "s#^ExecStart=$prefix/#ExecStart=$stage$prefix/#" "$file" >"$work/verify/$unit"
done

broker=$unit_dir/onceq-broker.service
grep -qx 'StateDirectory=onceq/broker' "$broker" || fail "the broker's journal is not in its StateDirectory"
grep -q -- '--data-dir /var/lib/onceq/broker' "$broker" || fail "the broker does not keep its journal in /var/lib/onceq/broker"
worker=$unit_dir/onceq-worker@.service
grep -qx 'EnvironmentFile=-/.*/worker-%i.env' "$worker" || fail "the worker template does not read its pool's environment file"
timeout_stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$worker")
[ -n "$timeout_stop" ] && [ "$timeout_stop" -gt "$stop_timeout" ] ||
  fail "onceq-worker@.service: TimeoutStopSec=${timeout_stop:-unset} must exceed the workers' stop timeout, $stop_timeout s"

# Installed into another prefix than the configured one, with
# `cmake --install --prefix`, the units name that prefix's binaries and
# configuration, not the configured prefix's.
other=$work/other
cmake --install "$build" --prefix "$other" >/dev/null
for unit in onceq-broker.service onceq-worker@.service onceq-web.service; do
  file=$other/lib/systemd/system/$unit
  [ -f "$file" ] || fail "$unit is not installed in $other/lib/systemd/system (--prefix)"
  exec_start=$(sed -n 's/^ExecStart=//p' "$file")
  [ "${exec_start%% *}" = "$other/bin/${unit%%@*}" ] || [ "${exec_start%% *}" = "$other/bin/${unit%.service}" ] ||
    fail "installed with --prefix $other, $unit starts ${exec_start%% *}"
  grep -q "^EnvironmentFile=-$other/etc/onceq/" "$file" ||
    fail "installed with --prefix $other, $unit reads its environment from outside it: $(grep '^EnvironmentFile' "$file" | head -1)"
done

# Warnings (an unknown key, a bad value) leave the exit status at 0: any
# output fails too. Documentation= is not checked here: the staged man
# pages are not where man looks.
cd "$work/verify"
if ! out=$(systemd-analyze verify --man=no ./onceq-broker.service ./onceq-worker@.service 2>&1) ||
   [ -n "$out" ]; then
  fail "systemd-analyze verify: $out"
fi
echo "units check: onceq-broker.service and onceq-worker@.service start $prefix/bin binaries and verify"
