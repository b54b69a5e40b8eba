#!/usr/bin/env bash
# batch_run.sh: the overhead of a batch. Time from the first dispatch to the
# last job done, for N noop jobs dispatched plainly (onceq-bench, pipelined)
# and for one batch of N noop jobs with a then (onceq batch dispatch; the
# time ends when the then job is done, told by `onceq wait`). REPEATS runs of
# each, alternating, on one broker and WORKERS worker processes; prints the
# medians and the overhead. The batch's jobs carry an empty payload: 10,000
# of onceq-bench's 100-byte payloads do not fit one 1 MiB message.
#   bash tests/bench/batch_run.sh [BUILD_DIR]   (env: JOBS, REPEATS, WORKERS)
set -euo pipefail
SCRIPT=batch_run.sh
BUILD=${1:-build}
# shellcheck source=tests/bench/lib.sh
source "$(dirname "$0")/lib.sh"
JOBS=${JOBS:-10000}
REPEATS=${REPEATS:-5}
WORKERS=${WORKERS:-2}
WINDOW=64
RUN_DEADLINE_S=120
POLL_S=0.005 # between two `onceq batch show` while the then is not dispatched
need_binaries "$BROKER_BIN" "$WORKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH"
WORKDIR=$(mktemp -d)
BROKER_PID="" WORKER_PID="" BEANSTALKD_PID="" OK=0
install_cleanup
INSECURE=1
BROKER_AUTH=(--insecure)
now_ms() { date +%s%3N; }
cli() { "$CLI_BIN" --broker "$FRONT" "$@"; }
onceq_bench() {
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" --broker "$FRONT" \
        --window "$WINDOW" --deadline "$RUN_DEADLINE_S" "$@"
}

start_broker_with --data-dir "$WORKDIR/data" --log-level warn --insecure
(cd "$WORKDIR" && exec setsid "$WORKER_BIN" --broker "$BACK" --processes "$WORKERS" \
    --log-level warn) >>"$WORKDIR/workers.log" 2>&1 &
WORKER_PID=$!
onceq_bench --jobs 200 --latency-jobs 0 --warmup 0 --queue bench --workers "$WORKERS" >/dev/null

plain_run() {
    local start end
    start=$(now_ms)
    onceq_bench --jobs "$JOBS" --latency-jobs 0 --warmup 0 --queue bench >/dev/null
    end=$(now_ms)
    echo $((end - start))
}

batch_run() {
    local start end out batch then_job deadline
    start=$(now_ms)
    out=$(cli batch dispatch --type noop --count "$JOBS" --queue bench --then noop)
    batch=$(sed -n 's/^batch \([0-9]*\):.*/\1/p' <<<"$out")
    deadline=$((start + RUN_DEADLINE_S * 1000))
    then_job=""
    while [[ -z $then_job ]]; do
        (($(now_ms) < deadline)) || die "the then of batch $batch was not dispatched in time"
        then_job=$(cli batch show "$batch" | sed -n 's/^  then *job \([0-9]*\)/\1/p')
        [[ -n $then_job ]] || sleep "$POLL_S"
    done
    cli wait "$then_job" --timeout "$RUN_DEADLINE_S" >/dev/null
    end=$(now_ms)
    echo $((end - start))
}

plain=() batched=()
for ((r = 0; r < REPEATS; r++)); do
    plain+=("$(plain_run)")
    batched+=("$(batch_run)")
done
mp=$(median "${plain[@]}")
mb=$(median "${batched[@]}")
echo "plain ms: ${plain[*]}  median $mp"
echo "batch ms: ${batched[*]}  median $mb"
awk -v a="$mb" -v b="$mp" 'BEGIN { printf "overhead: %+.1f%% (batch of %s with a then vs %s plain jobs)\n", (a - b) * 100 / b, "'"$JOBS"'", "'"$JOBS"'" }'
OK=1
