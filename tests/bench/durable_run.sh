#!/usr/bin/env bash
# Benchmark onceq with its journal against beanstalkd with its binlog, on
# loopback, in one run (see README.md here, "Durable"):
#
#   1. dispatch+cycle throughput: onceq --fsync always and batch against
#      beanstalkd -b DIR -f0 (fsync on every write) and -b DIR (fsync every
#      50 ms), with 1 and 8 producers and the same consumers, as ratios;
#   2. confirmed-dispatch throughput without consumers: onceq --fsync always
#      against beanstalkd -b DIR -f0, 1 and 8 producers;
#   3. replay: REPLAY_JOBS queued jobs, the server SIGKILLed and started
#      again, timed until it answers;
#   4. memory per queued job (100-byte payloads): RSS growth / jobs, onceq
#      with and without dispatch ids, and beanstalkd.
#
#   tests/bench/durable_run.sh [BUILD_DIR]     (or BUILD=... ; default ./build)
#
# Environment: JOBS (10000 per throughput run), WINDOW (64), REPEATS (3),
# WORKERS (2 consumers), PRODUCER_COUNTS ("1 8"), REPLAY_JOBS (1000000),
# FILL_PRODUCERS (4), RUN_DEADLINE_S (600, per benchmark run), INSECURE (1:
# onceq in plaintext; by default it speaks CURVE).
# Builds nothing. Everything it starts is stopped by PID on exit.
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
JOBS=${JOBS:-10000}
WINDOW=${WINDOW:-64}
REPEATS=${REPEATS:-3}
WORKERS=${WORKERS:-2}
PRODUCER_COUNTS=${PRODUCER_COUNTS:-"1 8"}
REPLAY_JOBS=${REPLAY_JOBS:-1000000}
FILL_PRODUCERS=${FILL_PRODUCERS:-4}
RUN_DEADLINE_S=${RUN_DEADLINE_S:-600}

SCRIPT=durable_run.sh
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

READY_TRIES=600        # x READY_SLEEP_S: a server gets 60 s to come up (replay included)
PING_TIMEOUT_MS=20     # a ping that waits longer makes the replay timing coarser
REPLAY_POLL_MAX=60000  # ping attempts while timing a replay (each about PING_TIMEOUT_MS)
WARMUP_JOBS=200
MAX_JOBS_HELD=4000000  # the broker's --max-jobs for the fill runs

need_binaries "$BROKER_BIN" "$WORKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH" "$BEANSTALK_BENCH"
command -v beanstalkd >/dev/null || die "beanstalkd not found in PATH"
need_numbers "$JOBS" "$WINDOW" "$REPEATS" "$WORKERS" "$REPLAY_JOBS" "$FILL_PRODUCERS" "$RUN_DEADLINE_S"
((REPEATS >= 1)) || die "REPEATS must be at least 1"

new_workdir durable-bench
setup_keys "$CLI_BIN"

now_ms() { date +%s%3N; }

# ---- onceq ---------------------------------------------------------------

# start_broker DATA_DIR FLAGS...: on fresh ports; waits until it answers.
start_broker() {
    local data=$1
    shift
    start_broker_with --data-dir "$data" --log-level info "${BROKER_AUTH[@]}" "$@"
}

# launch_broker DATA_DIR FLAGS...: on the current ports, without waiting.
launch_broker() {
    local data=$1
    shift
    spawn_broker --data-dir "$data" --log-level info "${BROKER_AUTH[@]}" "$@"
}

start_workers() {
    (cd "$WORKDIR" && exec setsid "$WORKER_BIN" --broker "$BACK" --processes "$WORKERS" \
        --log-level warn) >>"$WORKDIR/workers.log" 2>&1 &
    WORKER_PID=$!
}

onceq_bench() {
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" --broker "$FRONT" \
        --window "$WINDOW" --deadline "$RUN_DEADLINE_S" "$@"
}

# ---- beanstalkd ------------------------------------------------------------

beanstalk_bench() {
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$BEANSTALK_BENCH" --port "$BEANSTALKD_PORT" \
        --window "$WINDOW" --deadline "$RUN_DEADLINE_S" "$@"
}

# measure NAME COMMAND...: REPEATS runs, RESULT = median jobs/s.
measure() {
    local name=$1 line values=()
    shift
    for ((r = 1; r <= REPEATS; r++)); do
        line=$("$@") || die "$name failed (run $r)"
        echo "  $name: $line" >&2
        values+=("$(field "$line" jobs_per_s)")
    done
    RESULT=$(median "${values[@]}")
}

declare -A CYCLE DISPATCH

echo "durable benchmark: $JOBS jobs per run, window $WINDOW, $WORKERS consumers," \
    "$REPEATS runs each; beanstalkd: $(beanstalkd -v 2>&1 | head -n 1)" >&2

# ---- 1 and 2: throughput ----------------------------------------------------

for policy in always batch; do
    start_broker "$WORKDIR/data-$policy" --fsync "$policy"
    start_workers
    for p in $PRODUCER_COUNTS; do
        measure "onceq $policy cycle p=$p" onceq_bench --producers "$p" --dispatch-ids \
            --workers "$WORKERS" --jobs "$JOBS" --latency-jobs 0 --warmup "$WARMUP_JOBS"
        CYCLE[onceq-$policy-$p]=$RESULT
    done
    stop_pid "$WORKER_PID"
    WORKER_PID=""
    if [[ $policy == always ]]; then
        for p in $PRODUCER_COUNTS; do
            measure "onceq always dispatch p=$p" onceq_bench --producers "$p" --dispatch-ids \
                --dispatch-only --jobs "$JOBS" --queue "dispatch-$p"
            DISPATCH[onceq-$p]=$RESULT
        done
    fi
    stop_pid "$BROKER_PID"
    BROKER_PID=""
done

for mode in f0 f50; do
    mkdir -p "$WORKDIR/binlog-$mode"
    if [[ $mode == f0 ]]; then
        start_beanstalkd -b "$WORKDIR/binlog-$mode" -f0
    else
        start_beanstalkd -b "$WORKDIR/binlog-$mode"
    fi
    for p in $PRODUCER_COUNTS; do
        measure "beanstalkd $mode cycle p=$p" beanstalk_bench --producers "$p" \
            --consumers "$WORKERS" --jobs "$JOBS" --latency-jobs 0 --warmup "$WARMUP_JOBS"
        CYCLE[beanstalkd-$mode-$p]=$RESULT
        if [[ $mode == f0 ]]; then
            measure "beanstalkd f0 put p=$p" beanstalk_bench --producers "$p" --put-only \
                --jobs "$JOBS" --tube "put-$p"
            DISPATCH[beanstalkd-$p]=$RESULT
        fi
    done
    stop_pid "$BEANSTALKD_PID"
    BEANSTALKD_PID=""
done

# ---- 3 and 4: memory and replay ---------------------------------------------

# onceq_fill NAME [--dispatch-ids]: REPLAY_JOBS queued jobs; sets MEM (bytes
# per job), REPLAY_MS (start to first answer) and REPLAY_LOG_MS (the
# broker's own count).
onceq_fill() {
    local name=$1 ids=${2:-}
    local data="$WORKDIR/data-fill-$name"
    start_broker "$data" --fsync always --max-jobs "$MAX_JOBS_HELD"
    local before after
    before=$(rss_kb "$BROKER_PID")
    # shellcheck disable=SC2086
    onceq_bench --producers "$FILL_PRODUCERS" --dispatch-only --jobs "$REPLAY_JOBS" $ids >&2 ||
        die "filling the broker failed"
    after=$(rss_kb "$BROKER_PID")
    MEM=$(per_job $((after - before)) "$REPLAY_JOBS")
    echo "SIGKILL to the broker (on purpose), then a restart" >&2
    stop_pid "$BROKER_PID" KILL
    local start i
    start=$(now_ms)
    launch_broker "$data" --fsync always --max-jobs "$MAX_JOBS_HELD"
    for ((i = 0; i < REPLAY_POLL_MAX; i++)); do
        ping_ok && break
        kill -0 "$BROKER_PID" 2>/dev/null || die "the broker died replaying (see broker.log)"
    done
    REPLAY_MS=$(($(now_ms) - start))
    REPLAY_LOG_MS=$(grep -o 'in [0-9]* ms: [0-9]* ready' "$WORKDIR/broker.log" | tail -n 1 |
        awk '{ print $2 }')
    REPLAY_RSS=$(per_job $(($(rss_kb "$BROKER_PID") - before)) "$REPLAY_JOBS")
    stop_pid "$BROKER_PID"
    BROKER_PID=""
    rm -rf "$data"
}

echo "filling onceq with $REPLAY_JOBS jobs (no dispatch ids)" >&2
onceq_fill plain
MEM_PLAIN=$MEM
REPLAY_PLAIN_MS=$REPLAY_MS
REPLAY_PLAIN_LOG_MS=$REPLAY_LOG_MS
echo "filling onceq with $REPLAY_JOBS jobs (with dispatch ids)" >&2
onceq_fill ids --dispatch-ids
MEM_IDS=$MEM
REPLAY_IDS_MS=$REPLAY_MS
REPLAY_IDS_LOG_MS=$REPLAY_LOG_MS
REPLAY_IDS_RSS=$REPLAY_RSS

echo "filling beanstalkd with $REPLAY_JOBS jobs" >&2
mkdir -p "$WORKDIR/binlog-fill"
start_beanstalkd -b "$WORKDIR/binlog-fill"
BS_BEFORE=$(rss_kb "$BEANSTALKD_PID")
beanstalk_bench --producers "$FILL_PRODUCERS" --put-only --jobs "$REPLAY_JOBS" \
    --tube fill >&2 || die "filling beanstalkd failed"
BS_MEM=$(per_job $(($(rss_kb "$BEANSTALKD_PID") - BS_BEFORE)) "$REPLAY_JOBS")
echo "SIGKILL to beanstalkd (on purpose), then a restart" >&2
stop_pid "$BEANSTALKD_PID" KILL
BS_START=$(now_ms)
launch_beanstalkd -b "$WORKDIR/binlog-fill"
for ((i = 0; i < REPLAY_POLL_MAX; i++)); do
    bs_answers && break
    kill -0 "$BEANSTALKD_PID" 2>/dev/null || die "beanstalkd died replaying its binlog"
    sleep 0.01
done
BS_REPLAY_MS=$(($(now_ms) - BS_START))
stop_pid "$BEANSTALKD_PID"
BEANSTALKD_PID=""

# ---- the report ---------------------------------------------------------------

echo
echo "durable dispatch+cycle throughput, jobs/s (median of $REPEATS; $JOBS jobs, window $WINDOW," \
    "$WORKERS consumers, 100-byte payloads; onceq dispatches carry dispatch ids)"
echo
fmt="%-9s %12s %12s %14s %14s %10s %10s\n"
# shellcheck disable=SC2059
printf "$fmt" producers "onceq always" "onceq batch" "bstalkd -f0" "bstalkd -b" "always/f0" "batch/-b"
for p in $PRODUCER_COUNTS; do
    a=${CYCLE[onceq-always-$p]} b=${CYCLE[onceq-batch-$p]}
    f0=${CYCLE[beanstalkd-f0-$p]} f50=${CYCLE[beanstalkd-f50-$p]}
    # shellcheck disable=SC2059
    printf "$fmt" "$p" "$a" "$b" "$f0" "$f50" "$(ratio "$a" "$f0")" "$(ratio "$b" "$f50")"
done
echo
echo "confirmed dispatches/s, no consumers: every answer after an fsync (onceq --fsync always," \
    "beanstalkd -b -f0)"
echo
fmt="%-9s %12s %14s %10s\n"
# shellcheck disable=SC2059
printf "$fmt" producers "onceq always" "bstalkd -f0" "ratio"
for p in $PRODUCER_COUNTS; do
    a=${DISPATCH[onceq-$p]} f0=${DISPATCH[beanstalkd-$p]}
    # shellcheck disable=SC2059
    printf "$fmt" "$p" "$a" "$f0" "$(ratio "$a" "$f0")"
done
echo
echo "replay of $REPLAY_JOBS queued jobs, SIGKILL to first answer:"
echo "  onceq:      ${REPLAY_PLAIN_MS} ms (broker's own count ${REPLAY_PLAIN_LOG_MS} ms);" \
    "with dispatch ids ${REPLAY_IDS_MS} ms (${REPLAY_IDS_LOG_MS} ms)"
echo "  beanstalkd: ${BS_REPLAY_MS} ms (-b, binlog replay)"
echo
echo "memory per queued job (RSS growth / $REPLAY_JOBS jobs, 100-byte payloads):"
echo "  onceq:      ${MEM_PLAIN} bytes; ${MEM_IDS} bytes with a dispatch id per job" \
    "(${REPLAY_IDS_RSS} bytes after replay)"
echo "  beanstalkd: ${BS_MEM} bytes"
OK=1
