#!/usr/bin/env bash
# Memory per queued job, on its own: durable_run.sh's item 4 without the
# throughput and replay runs, repeated. Each repeat starts a fresh
# onceq-broker and a fresh beanstalkd, queues JOBS 100-byte jobs into each
# (no consumers) and takes the RSS growth / JOBS; the report gives the
# median of REPEATS per server.
#
#   tests/bench/memory_run.sh [BUILD_DIR]     (or BUILD=... ; default ./build)
#
# Environment: JOBS (1000000, durable_run.sh's REPLAY_JOBS), REPEATS (3),
# FILL_PRODUCERS (4), WINDOW (64), FSYNC (the broker's --fsync: always, as
# durable_run.sh), RUN_DEADLINE_S (600), INSECURE (1: onceq in plaintext).
# Builds nothing. Everything it starts is stopped by PID on exit.
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
JOBS=${JOBS:-1000000}
REPEATS=${REPEATS:-3}
FILL_PRODUCERS=${FILL_PRODUCERS:-4}
WINDOW=${WINDOW:-64}
FSYNC=${FSYNC:-always}
RUN_DEADLINE_S=${RUN_DEADLINE_S:-600}

SCRIPT=memory_run.sh
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

READY_TRIES=600 # x READY_SLEEP_S: a server gets 60 s to come up
MAX_JOBS_HELD=4000000

need_binaries "$BROKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH" "$BEANSTALK_BENCH"
command -v beanstalkd >/dev/null || die "beanstalkd not found in PATH"
need_numbers "$JOBS" "$REPEATS" "$FILL_PRODUCERS" "$WINDOW" "$RUN_DEADLINE_S"
((REPEATS >= 1 && JOBS >= 1)) || die "REPEATS and JOBS must be at least 1"

new_workdir memory-bench
setup_keys "$CLI_BIN"

start_broker() {
    start_broker_with --data-dir "$1" --log-level warn --fsync "$FSYNC" --max-jobs "$MAX_JOBS_HELD" \
        "${BROKER_AUTH[@]}"
}

ONCEQ=()
BEANSTALKD=()
for ((r = 1; r <= REPEATS; r++)); do
    data=$WORKDIR/data-$r
    start_broker "$data"
    before=$(rss_kb "$BROKER_PID")
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" --broker "$FRONT" \
        --window "$WINDOW" --deadline "$RUN_DEADLINE_S" --producers "$FILL_PRODUCERS" \
        --dispatch-only --jobs "$JOBS" >&2 || die "filling the broker failed"
    ONCEQ+=("$(per_job $(($(rss_kb "$BROKER_PID") - before)) "$JOBS")")
    stop_pid "$BROKER_PID"
    BROKER_PID=""
    rm -rf "$data"

    mkdir -p "$WORKDIR/binlog-$r"
    start_beanstalkd -b "$WORKDIR/binlog-$r"
    before=$(rss_kb "$BEANSTALKD_PID")
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$BEANSTALK_BENCH" --port "$BEANSTALKD_PORT" \
        --window "$WINDOW" --deadline "$RUN_DEADLINE_S" --producers "$FILL_PRODUCERS" \
        --put-only --jobs "$JOBS" --tube fill >&2 || die "filling beanstalkd failed"
    BEANSTALKD+=("$(per_job $(($(rss_kb "$BEANSTALKD_PID") - before)) "$JOBS")")
    stop_pid "$BEANSTALKD_PID"
    BEANSTALKD_PID=""
    rm -rf "$WORKDIR/binlog-$r"
    echo "repeat $r: onceq ${ONCEQ[-1]} B/job, beanstalkd ${BEANSTALKD[-1]} B/job" >&2
done

echo "memory per queued job (RSS growth / $JOBS jobs, 100-byte payloads, median of $REPEATS):"
echo "  onceq:      $(median "${ONCEQ[@]}") bytes (runs: ${ONCEQ[*]})"
echo "  beanstalkd: $(median "${BEANSTALKD[@]}") bytes (runs: ${BEANSTALKD[*]})"
OK=1
