#!/usr/bin/env bash
# The whole test suite: installs what it needs, checks the C sources'
# formatting, builds, and runs every test under ctest in parallel: the
# unit, integration, hostile and chaos tests, and the worker-setting
# variants of the tests where prefetch and batching matter (label
# variant; skip them with ONCEQ_NO_VARIANTS=1); runs each fuzz target
# briefly from its seed corpus (skip with ONCEQ_NO_FUZZ=1); then the suite
# once more in a build with AddressSanitizer and UndefinedBehaviorSanitizer,
# without the variants and without the PHP and browser tests, whose C side
# the other tests already cover (skip that pass with ONCEQ_NO_SANITIZE=1).
#
#   bash tests/run.sh            # the whole suite, as CI runs it
#   bash tests/run.sh --quick    # the fast tier (ctest -L fast): build,
#                                # unit tests and the quickest integration
#                                # tests, about a minute; no install step
#
# ONCEQ_TEST_JOBS sets how many tests run at once (default: the number of
# CPUs); tests that must not overlap hold a resource lock.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=${ONCEQ_TEST_JOBS:-$(nproc)}
ctest_run() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure --timeout 300 -j "$jobs" "$@"
}

if [ "${1:-}" = --quick ]; then
  echo "== build"
  BUILD_DIR=$top/build bash deploy/build.sh
  echo "== tests (fast tier)"
  ctest_run "$top/build" -L fast
  exit 0
elif [ $# -gt 0 ]; then
  echo "usage: bash tests/run.sh [--quick]" >&2
  exit 2
fi

bash deploy/install-deps.sh

echo "== format"
bash tests/format.sh
echo "== build"
BUILD_DIR=$top/build bash deploy/build.sh
echo "== tests"
if [ "${ONCEQ_NO_VARIANTS:-0}" = 1 ]; then
  ctest_run "$top/build" -LE variant
else
  ctest_run "$top/build"
fi

if [ "${ONCEQ_NO_FUZZ:-0}" != 1 ]; then
  echo "== fuzz (clang, libFuzzer, a bounded number of runs per target)"
  BUILD_DIR=$top/build-fuzz bash tests/fuzz/run.sh
fi

if [ "${ONCEQ_NO_SANITIZE:-0}" != 1 ]; then
  echo "== build (address and undefined-behaviour sanitizers)"
  BUILD_DIR=$top/build-asan BUILD_TYPE=Debug bash deploy/build.sh -DONCEQ_SANITIZE=ON
  echo "== tests (sanitizers)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest_run "$top/build-asan" -LE "variant|php|web"
fi
