#!/usr/bin/env bash
# What CURVE costs (see README.md here, "CURVE"):
#
#   1. throughput with CURVE and in plaintext, the same runs otherwise:
#      dispatch+cycle jobs/s with WORKERS consumers, and confirmed
#      dispatches/s without consumers; each run on a fresh broker, the two
#      modes taking turns, the median of REPEATS runs and the ratio
#      CURVE / plaintext;
#   2. the broker's CPU while FLOOD connections keep knocking: first with a
#      producer key over --max-producers MAX_PRODUCERS (each refused at its
#      handshake), then each with a fresh key nobody allowed; next to the
#      idle broker's CPU over as long.
#
#   tests/bench/curve_run.sh [BUILD_DIR]      (or BUILD=... ; default ./build)
#
# Environment: JOBS (20000), WINDOW (64), REPEATS (5), WORKERS (2), FLOOD
# (200), FLOOD_S (10), MAX_PRODUCERS (10), RUN_DEADLINE_S (300).
# Builds nothing. Everything it starts is stopped by PID on exit.
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
JOBS=${JOBS:-20000}
WINDOW=${WINDOW:-64}
REPEATS=${REPEATS:-5}
WORKERS=${WORKERS:-2}
FLOOD=${FLOOD:-200}
FLOOD_S=${FLOOD_S:-10}
MAX_PRODUCERS=${MAX_PRODUCERS:-10}
RUN_DEADLINE_S=${RUN_DEADLINE_S:-300}

SCRIPT=curve_run.sh
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

need_binaries "$BROKER_BIN" "$WORKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH"
need_numbers "$JOBS" "$WINDOW" "$REPEATS" "$WORKERS" "$FLOOD" "$FLOOD_S" "$MAX_PRODUCERS"
((REPEATS >= 1)) || die "REPEATS must be at least 1"

new_workdir curve-bench
setup_keys "$CLI_BIN"
# A producer key for the flood over --max-producers.
"$CLI_BIN" keygen --dir "$WORKDIR/client-keys" bench-producer >/dev/null 2>&1 ||
    die "onceq keygen failed"
mkdir -p "$WORKDIR/keys/producers"
mv "$WORKDIR/client-keys/bench-producer.key" "$WORKDIR/keys/producers/"
PRODUCER_KEY=$WORKDIR/client-keys/bench-producer.key_secret

# start_broker MODE FLAGS...: MODE curve or plain; waits until it answers.
start_broker() {
    local mode=$1
    shift
    setup_keys "$CLI_BIN" "$mode"
    start_broker_with --no-journal --log-level warn "${BROKER_AUTH[@]}" "$@"
}

stop_all() {
    stop_pid "$WORKER_PID"
    WORKER_PID=""
    stop_pid "$BROKER_PID"
    BROKER_PID=""
}

bench() {
    timeout $((RUN_DEADLINE_S + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" --broker "$FRONT" \
        --window "$WINDOW" --deadline "$RUN_DEADLINE_S" "$@"
}

# CPU seconds (user + system) of a pid so far.
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); split($0, f, " ");
        printf "%.3f", (f[12] + f[13]) / hz }' "/proc/$1/stat"
}

# cpu_pct PID SECONDS COMMAND...: the pid's CPU % while COMMAND runs (or,
# without a command, over SECONDS of idling).
cpu_pct() {
    local pid=$1 seconds=$2
    shift 2
    local before after t0 t1
    before=$(cpu_s "$pid")
    t0=$(date +%s.%N)
    if (($#)); then "$@"; else sleep "$seconds"; fi
    t1=$(date +%s.%N)
    after=$(cpu_s "$pid")
    awk -v a="$after" -v b="$before" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.1f", (a - b) * 100 / (t1 - t0) }'
}

# ---- 1. throughput, CURVE against plaintext ----------------------------------

declare -A CYCLE DISPATCH
for mode in curve plain; do CYCLE[$mode]=""; DISPATCH[$mode]=""; done
echo "throughput: $JOBS jobs, window $WINDOW, $WORKERS workers, $REPEATS runs per mode" >&2
for ((r = 1; r <= REPEATS; r++)); do
    for mode in curve plain; do
        start_broker "$mode"
        (cd "$WORKDIR" && exec setsid "$WORKER_BIN" --broker "$BACK" --processes "$WORKERS" \
            --log-level warn) >>"$WORKDIR/workers.log" 2>&1 &
        WORKER_PID=$!
        line=$(bench --workers "$WORKERS" --jobs "$JOBS" --latency-jobs 0) ||
            die "the $mode cycle run failed"
        echo "  $mode: $line" >&2
        CYCLE[$mode]+=" $(field "$line" jobs_per_s)"
        stop_pid "$WORKER_PID"
        WORKER_PID=""
        line=$(bench --dispatch-only --jobs "$JOBS") || die "the $mode dispatch run failed"
        echo "  $mode: $line" >&2
        DISPATCH[$mode]+=" $(field "$line" jobs_per_s)"
        stop_all
    done
done

# ---- 2. the broker's CPU under a connection flood ------------------------------

echo "flood: $FLOOD connections for $FLOOD_S s, --max-producers $MAX_PRODUCERS" >&2
start_broker curve --max-producers "$MAX_PRODUCERS"
IDLE=$(cpu_pct "$BROKER_PID" "$FLOOD_S")
# The flood's line goes to a file: cpu_pct runs in a subshell.
flood() { bench --flood "$FLOOD" --flood-s "$FLOOD_S" "$@" >"$WORKDIR/flood.out"; }
OVER=$(cpu_pct "$BROKER_PID" "$FLOOD_S" flood --key "$PRODUCER_KEY")
OVER_LINE=$(cat "$WORKDIR/flood.out")
UNKNOWN=$(cpu_pct "$BROKER_PID" "$FLOOD_S" flood --flood-unknown)
UNKNOWN_LINE=$(cat "$WORKDIR/flood.out")
echo "  over the limit: $OVER_LINE" >&2
echo "  unknown keys:   $UNKNOWN_LINE" >&2
STATS=$("$CLI_BIN" --broker "$FRONT" stats --json | jq -c '.auth')
stop_all

echo
echo "CURVE against plaintext, median of $REPEATS runs each ($JOBS jobs, window $WINDOW):"
fmt="  %-34s %12s %12s %7s\n"
# shellcheck disable=SC2059
printf "$fmt" "" "CURVE" "plaintext" "ratio"
# shellcheck disable=SC2086
c=$(median ${CYCLE[curve]}) p=$(median ${CYCLE[plain]})
# shellcheck disable=SC2059
printf "$fmt" "jobs/s, dispatch to done ($WORKERS workers)" "$c" "$p" "$(ratio "$c" "$p")"
# shellcheck disable=SC2086
c=$(median ${DISPATCH[curve]}) p=$(median ${DISPATCH[plain]})
# shellcheck disable=SC2059
printf "$fmt" "confirmed dispatches/s (no workers)" "$c" "$p" "$(ratio "$c" "$p")"
echo "  runs: cycle curve${CYCLE[curve]}; plain${CYCLE[plain]}"
echo "        dispatch curve${DISPATCH[curve]}; plain${DISPATCH[plain]}"
echo
echo "broker CPU, $FLOOD connections knocking for $FLOOD_S s each time:"
echo "  idle:                                  $IDLE %"
echo "  producer key over --max-producers $MAX_PRODUCERS: $OVER % ($(field "$OVER_LINE" connections_per_s) new connections/s)"
echo "  a fresh unknown key each:              $UNKNOWN % ($(field "$UNKNOWN_LINE" connections_per_s) new connections/s)"
echo "  broker's auth stats after: $STATS"
OK=1
