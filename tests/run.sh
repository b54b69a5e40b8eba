#!/usr/bin/env bash
# The whole test suite: installs what it needs, checks the C sources'
# formatting, builds, and runs every unit and integration test under ctest;
# runs the integration tests and the chaos verdict twice more, with workers
# that take one job at a time and with workers that hold 8 and batch 8
# (skip both with ONCEQ_NO_PREFETCH_PASS=1);
# runs each fuzz target briefly from its seed corpus (skip with
# ONCEQ_NO_FUZZ=1); then the same suite once more in a build with
# AddressSanitizer and UndefinedBehaviorSanitizer (skip that pass with
# ONCEQ_NO_SANITIZE=1).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bash deploy/install-deps.sh

echo "== format"
bash tests/format.sh
echo "== build"
BUILD_DIR=$top/build bash deploy/build.sh
echo "== tests"
ctest --test-dir "$top/build" --output-on-failure --timeout 300
if [ "${ONCEQ_NO_PREFETCH_PASS:-0}" != 1 ]; then
  # The workers' default, --prefetch auto, holds up to 8 short jobs. Every
  # integration test and the chaos verdict again with prefetch off and with
  # it fixed at 8 and batches of 8, the workers the tests start taking these
  # from the environment. About 4 minutes each.
  echo "== integration tests with --prefetch 1 (one job at a time)"
  ONCEQ_PREFETCH=1 \
    ctest --test-dir "$top/build" -L "integration|chaos" --output-on-failure --timeout 300
  echo "== integration tests with --prefetch 8 and batches on"
  ONCEQ_PREFETCH=8 ONCEQ_BATCH=8 \
    ctest --test-dir "$top/build" -L "integration|chaos" --output-on-failure --timeout 300
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
    ctest --test-dir "$top/build-asan" --output-on-failure --timeout 300
fi
