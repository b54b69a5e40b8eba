#!/usr/bin/env bash
# Build the libFuzzer targets with clang and run each for a bounded number of
# inputs from the seed corpus in tests/fuzz/corpus/<target>. The seeds are
# copied to a scratch dir first, so the inputs the fuzzer finds never change
# the tree. A crash, a leak or a sanitizer report fails the run (libFuzzer
# exits non-zero and leaves the input as crash-* in the scratch dir).
#   ONCEQ_FUZZ_RUNS       inputs per target (default 200000)
#   ONCEQ_FUZZ_HTTP_RUNS  inputs of fuzz_metrics_http, each one TCP connection
#                         to the /metrics server in the process (default 5000)
#   BUILD_DIR             where to build (default ./build-fuzz)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$top/build-fuzz}
runs=${ONCEQ_FUZZ_RUNS:-200000}
http_runs=${ONCEQ_FUZZ_HTTP_RUNS:-5000}
# Inputs longer than a few KiB only slow the fuzzer down: the decoders'
# limits are tested by the unit tests.
max_len=4096
seed=1

cmake -S "$top" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DONCEQ_FUZZ=ON >/dev/null
cmake --build "$build" --target fuzz_decode fuzz_record fuzz_metrics_http -j "$(nproc)" >/dev/null

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in decode record metrics_http; do
  target_runs=$runs
  [ "$target" = metrics_http ] && target_runs=$http_runs
  mkdir -p "$scratch/$target"
  cp "$top/tests/fuzz/corpus/$target/"* "$scratch/$target/"
  echo "fuzz_$target: $target_runs runs"
  (cd "$scratch" && "$build/bin/fuzz_$target" -runs="$target_runs" -seed="$seed" -max_len="$max_len" \
    -print_final_stats=1 "$scratch/$target" 2>"$scratch/$target.log") || {
    tail -n 40 "$scratch/$target.log" >&2
    echo "fuzz_$target failed" >&2
    exit 1
  }
  grep -E '^stat::number_of_executed_units|^Done' "$scratch/$target.log" || true
done
