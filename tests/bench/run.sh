#!/usr/bin/env bash
# Benchmark onceq against beanstalkd and a Redis reliable queue (BLMOVE to a
# processing list, LREM) on loopback: noop jobs with 100-byte payloads, one
# pipelining producer, W = 1, 2, 4 single-job consumers. Prints the median
# over REPEATS runs of throughput and end-to-end latency for each, the
# ratios onceq / peer, and the servers' peak RSS. See README.md here. The
# Redis peer is skipped, with a message, when redis-server or redis-bench
# (built with libhiredis-dev) is missing.
#
#   tests/bench/run.sh [BUILD_DIR]        (or BUILD=... ; default ./build)
#
# Environment: JOBS (20000), LATENCY_JOBS (500), WINDOW (64), REPEATS (3),
# WORKER_COUNTS ("1 2 4"), RUN_DEADLINE_S (300, per benchmark run), INSECURE
# (1: onceq in plaintext, like beanstalkd; by default it speaks CURVE),
# BROKER_FLAGS (more onceq-broker flags, split on spaces: "--metrics
# 127.0.0.1:9751"), LATENCY_MODE (wait: onceq's latency sample ends when the
# broker answers a wait for the job; poll: when stats, polled back to back,
# show it done; see README.md).
# Builds nothing: build the tree first (cmake --build BUILD_DIR).
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
JOBS=${JOBS:-20000}
LATENCY_JOBS=${LATENCY_JOBS:-500}
WINDOW=${WINDOW:-64}
REPEATS=${REPEATS:-3}
WORKER_COUNTS=${WORKER_COUNTS:-"1 2 4"}
RUN_DEADLINE_S=${RUN_DEADLINE_S:-300}
read -r -a BROKER_EXTRA <<<"${BROKER_FLAGS:-}"
LATENCY_MODE=${LATENCY_MODE:-wait}

SCRIPT=run.sh
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

need_binaries "$BROKER_BIN" "$WORKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH" "$BEANSTALK_BENCH"
command -v beanstalkd >/dev/null || die "beanstalkd not found in PATH"
WITH_REDIS=1
if ! command -v redis-server >/dev/null; then
    echo "$SCRIPT: skipping the Redis peer: redis-server not found in PATH" \
        "(Debian: apt-get install redis-server libhiredis-dev)" >&2
    WITH_REDIS=0
elif [[ ! -x $REDIS_BENCH ]]; then
    echo "$SCRIPT: skipping the Redis peer: no $REDIS_BENCH (it is built when" \
        "libhiredis-dev is installed: apt-get install libhiredis-dev, then rebuild)" >&2
    WITH_REDIS=0
fi
need_numbers "$JOBS" "$LATENCY_JOBS" "$WINDOW" "$REPEATS" "$RUN_DEADLINE_S"
((REPEATS >= 1)) || die "REPEATS must be at least 1"
[[ $LATENCY_MODE == wait || $LATENCY_MODE == poll ]] || die "LATENCY_MODE must be wait or poll"

new_workdir bench
setup_keys "$CLI_BIN"

# ---- onceq ---------------------------------------------------------------

# In memory, like beanstalkd without -b: durable_run.sh compares the journals.
start_broker() {
    start_broker_with --no-journal --log-level warn "${BROKER_AUTH[@]}" \
        ${BROKER_EXTRA[@]+"${BROKER_EXTRA[@]}"}
}

start_workers() {
    local count=$1
    (cd "$WORKDIR" && exec setsid "$WORKER_BIN" --broker "$BACK" --processes "$count") \
        >>"$WORKDIR/worker-$count.log" 2>&1 &
    WORKER_PID=$!
}

run_onceq() {
    local workers=$1
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" --broker "$FRONT" \
        --workers "$workers" --jobs "$JOBS" --window "$WINDOW" \
        --latency-jobs "$LATENCY_JOBS" --latency-mode "$LATENCY_MODE" --deadline "$RUN_DEADLINE_S"
}

# ---- beanstalkd ----------------------------------------------------------

run_beanstalkd() {
    local workers=$1
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$BEANSTALK_BENCH" --port "$BEANSTALKD_PORT" \
        --consumers "$workers" --jobs "$JOBS" --window "$WINDOW" \
        --latency-jobs "$LATENCY_JOBS" --deadline "$RUN_DEADLINE_S"
}

# ---- redis ---------------------------------------------------------------

start_redis() {
    for ((attempt = 0; attempt < START_ATTEMPTS; attempt++)); do
        REDIS_PORT=$(random_port)
        # In memory, like beanstalkd without -b: no snapshots, no append-only file.
        (cd "$WORKDIR" && exec setsid redis-server --bind 127.0.0.1 --port "$REDIS_PORT" \
            --save "" --appendonly no --dir "$WORKDIR") >>"$WORKDIR/redis.log" 2>&1 &
        REDIS_PID=$!
        for ((i = 0; i < READY_TRIES; i++)); do
            kill -0 "$REDIS_PID" 2>/dev/null || break
            if (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; then
                return 0
            fi
            sleep "$READY_SLEEP_S"
        done
        stop_pid "$REDIS_PID"
        REDIS_PID=""
    done
    die "redis-server did not come up (see $WORKDIR/redis.log)"
}

run_redis() {
    local workers=$1
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$REDIS_BENCH" --port "$REDIS_PORT" \
        --consumers "$workers" --jobs "$JOBS" --window "$WINDOW" \
        --latency-jobs "$LATENCY_JOBS" --deadline "$RUN_DEADLINE_S"
}

# ---- numbers -------------------------------------------------------------

peak_rss() { awk '/^VmHWM:/ { print $2 " " $3 }' "/proc/$1/status" 2>/dev/null || echo "?"; }

# measure SYSTEM W: REPEATS runs; sets RESULT to "jobs/s p50 p99" medians.
measure() {
    local system=$1 workers=$2 line tput=() p50=() p99=()
    for ((r = 1; r <= REPEATS; r++)); do
        line=$("run_$system" "$workers") || die "$system benchmark failed (W=$workers, run $r)"
        echo "  $line" >&2
        tput+=("$(field "$line" jobs_per_s)")
        p50+=("$(field "$line" p50_us)")
        p99+=("$(field "$line" p99_us)")
    done
    RESULT="$(median "${tput[@]}") $(median "${p50[@]}") $(median "${p99[@]}")"
}

declare -A ONCEQ BEANSTALKD REDIS

echo "onceq: broker and workers from $BUILD; $JOBS jobs, window $WINDOW," \
    "$LATENCY_JOBS latency jobs (onceq's by $LATENCY_MODE), $REPEATS runs each;" \
    "${BROKER_AUTH[0]}" >&2
start_broker
for w in $WORKER_COUNTS; do
    start_workers "$w"
    measure onceq "$w"
    ONCEQ[$w]=$RESULT
    stop_pid "$WORKER_PID"
    WORKER_PID=""
done
BROKER_RSS=$(peak_rss "$BROKER_PID")
stop_pid "$BROKER_PID"
BROKER_PID=""

echo "beanstalkd: $(beanstalkd -v 2>&1 | head -n 1)" >&2
start_beanstalkd
for w in $WORKER_COUNTS; do
    measure beanstalkd "$w"
    BEANSTALKD[$w]=$RESULT
done
BEANSTALKD_RSS=$(peak_rss "$BEANSTALKD_PID")
stop_pid "$BEANSTALKD_PID"
BEANSTALKD_PID=""

REDIS_RSS="-"
if ((WITH_REDIS)); then
    echo "redis: $(redis-server --version 2>&1 | head -n 1)" >&2
    start_redis
    for w in $WORKER_COUNTS; do
        measure redis "$w"
        REDIS[$w]=$RESULT
    done
    REDIS_RSS=$(peak_rss "$REDIS_PID")
    stop_pid "$REDIS_PID"
    REDIS_PID=""
fi

echo
echo "median of $REPEATS runs; $JOBS jobs pipelined (window $WINDOW) for jobs/s;" \
    "$LATENCY_JOBS jobs one at a time for latency (dispatch to done, in µs)"
echo
fmt="%-7s  %10s %7s %7s  %10s %7s %7s  %6s %6s %6s  %10s %7s %7s  %6s %6s %6s\n"
# shellcheck disable=SC2059
printf "$fmt" "workers" "onceq j/s" "p50" "p99" "bean j/s" "p50" "p99" \
    "j/s x" "p50 x" "p99 x" "redis j/s" "p50" "p99" "j/s x" "p50 x" "p99 x"
for w in $WORKER_COUNTS; do
    read -r ot op50 op99 <<<"${ONCEQ[$w]}"
    read -r bt bp50 bp99 <<<"${BEANSTALKD[$w]}"
    read -r rt rp50 rp99 <<<"${REDIS[$w]:-- - -}"
    # shellcheck disable=SC2059
    printf "$fmt" "$w" "$ot" "$op50" "$op99" "$bt" "$bp50" "$bp99" \
        "$(ratio "$ot" "$bt")" "$(ratio "$op50" "$bp50")" "$(ratio "$op99" "$bp99")" \
        "$rt" "$rp50" "$rp99" \
        "$(ratio "$ot" "$rt")" "$(ratio "$op50" "$rp50")" "$(ratio "$op99" "$rp99")"
done
echo
echo "ratios (x) are onceq / the peer on their left: beanstalkd, then Redis (j/s: higher is"
echo "better for onceq; p50, p99: lower is)"
((WITH_REDIS)) || echo "Redis: skipped (see the message above)"
echo "onceq-broker peak RSS (VmHWM): $BROKER_RSS; beanstalkd: $BEANSTALKD_RSS; redis-server: $REDIS_RSS"
OK=1
