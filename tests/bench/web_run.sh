#!/usr/bin/env bash
# What onceq-web costs, and how fast its pages are (README.md here, "The
# dashboard"). Two parts, each bounded:
#
#   pages  a broker (--insecure --no-journal) holding BULK (1,000,000) ready
#          jobs and FAILED (10,000) failed ones; onceq-web in front of it;
#          each page asked REQUESTS (200) times over one connection; p50,
#          p99 and max per page, in ms. Filling the failed store dispatches
#          one job per onceq call, which takes minutes for 10,000.
#   cost   the noop cycle (onceq-bench, JOBS (400,000) jobs: longer than the
#          5 s period of live updates, WORKERS workers) with the
#          dashboard closed, then with every page open and live (each asked
#          every 5 s, as live.js does, plus onceq-web's own sampling),
#          REPEATS times each, alternating; the ratio open / closed of the
#          medians of jobs/s.
#
#   tests/bench/web_run.sh [BUILD_DIR] [pages|cost|both]
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
PART=${2:-both}
BIN=$BUILD/bin
BULK=${BULK:-1000000}
FAILED=${FAILED:-10000}
REQUESTS=${REQUESTS:-200}
JOBS=${JOBS:-400000}
WORKERS=${WORKERS:-2}
REPEATS=${REPEATS:-3}
DEADLINE_S=${DEADLINE_S:-900}
WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/onceq-web-bench.XXXXXX")
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORKDIR"
}
trap cleanup EXIT
for b in onceq-broker onceq-web onceq onceq-bench onceq-test-worker; do
    [ -x "$BIN/$b" ] || { echo "web_run.sh: $BIN/$b is missing: build first" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "web_run.sh: curl not found" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
FRONT=tcp://127.0.0.1:$(port)
BACK=tcp://127.0.0.1:$(port)
export ONCEQ_BROKER=$FRONT

start_broker() {
    "$BIN/onceq-broker" --insecure --no-journal --front "$FRONT" --back "$BACK" \
        --max-jobs $((BULK + FAILED + JOBS + 1000)) >"$WORKDIR/broker.log" 2>&1 &
    BROKER=$!
    PIDS+=("$BROKER")
    for _ in $(seq 1 100); do "$BIN/onceq" --timeout-ms 200 ping >/dev/null 2>&1 && return; sleep 0.1; done
    echo "web_run.sh: the broker did not answer" >&2
    exit 1
}
stop_broker() { kill "$BROKER"; wait "$BROKER" 2>/dev/null || true; }

start_web() {
    local hash
    hash=$(openssl passwd -6 bench)
    printf 'bench admin %s\n' "$hash" >"$WORKDIR/users"
    chmod 600 "$WORKDIR/users"
    "$BIN/onceq-web" --users "$WORKDIR/users" --broker "$FRONT" --listen 127.0.0.1:0 \
        >"$WORKDIR/web.log" 2>&1 &
    WEB=$!
    PIDS+=("$WEB")
    for _ in $(seq 1 100); do
        WEB_PORT=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$WORKDIR/web.log")
        [ -n "$WEB_PORT" ] && return
        sleep 0.1
    done
    echo "web_run.sh: onceq-web did not start" >&2
    exit 1
}

# p50 p99 max of the numbers on stdin (seconds), in ms.
quantiles() {
    sort -g | awk '{ v[NR] = $1 * 1000 } END {
        i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
        i99 = int(NR * 0.99 + 0.999); if (i99 > NR) i99 = NR
        printf "%.2f %.2f %.2f", v[i50], v[i99], v[NR] }'
}

pages() {
    start_broker
    "$BIN/onceq-bench" --broker "$FRONT" --queue bulk --jobs "$BULK" --dispatch-only --window 256 >/dev/null
    "$BIN/onceq-test-worker" --broker "$BACK" --queue failing --name filler \
        >"$WORKDIR/filler.log" 2>&1 &
    local filler=$!
    PIDS+=("$filler")
    local end=$((SECONDS + DEADLINE_S))
    for i in $(seq 1 "$FAILED"); do
        "$BIN/onceq" dispatch fail --queue failing \
            --payload "{\"permanent\":true,\"message\":\"card declined for order $i\"}" >/dev/null
        [ $SECONDS -lt $end ] || { echo "web_run.sh: filling took over ${DEADLINE_S}s" >&2; exit 1; }
    done
    while [ "$("$BIN/onceq" stats --json | jq '[.queues[].failed] | add')" -lt "$FAILED" ]; do
        [ $SECONDS -lt $end ] || { echo "web_run.sh: the jobs did not fail in time" >&2; exit 1; }
        sleep 0.2
    done
    kill "$filler"
    start_web
    local base=http://127.0.0.1:$WEB_PORT
    echo "pages: $BULK jobs ready, $FAILED failed; $REQUESTS requests per page over one connection"
    printf '%-40s %9s %9s %9s\n' page p50_ms p99_ms max_ms
    for path in / /workers "/failed" "/failed?limit=200" "/failed?queue=failing&limit=200" \
        "/failed?q=order+9999" "/failed?type=fail&limit=200" /review "/job?id=$((BULK / 2))"; do
        local args=()
        for _ in $(seq 1 "$REQUESTS"); do args+=(-o /dev/null "$base$path"); done
        curl -s -u bench:bench -w "%{time_total}\n" "${args[@]}" >"$WORKDIR/times"
        printf '%-40s %9s %9s %9s\n' "$path" $(quantiles <"$WORKDIR/times")
    done
    kill "$WEB"
    stop_broker
}

cycle() { # jobs/s of one noop cycle
    "$BIN/onceq-bench" --broker "$FRONT" --queue cycle --jobs "$JOBS" --latency-jobs 0 --warmup 200 \
        --workers "$WORKERS" | sed -n 's/.*jobs_per_s=\([0-9.]*\).*/\1/p'
}

cost() {
    start_broker
    for w in $(seq 1 "$WORKERS"); do
        "$BIN/onceq-test-worker" --broker "$BACK" --queue cycle --name "cycle$w" \
            >"$WORKDIR/worker$w.log" 2>&1 &
        PIDS+=($!)
    done
    start_web
    local base=http://127.0.0.1:$WEB_PORT
    local closed=() open=()
    # The order alternates (closed first in odd runs, open first in even
    # ones), so that a warm-up or a drift of the machine favours neither.
    for r in $(seq 1 "$REPEATS"); do
        if ((r % 2)); then closed+=("$(cycle)"); fi
        # every page open and live: each asked every 5 s with the live header
        timeout "$DEADLINE_S" bash -c "while :; do
            for p in / /workers /failed /review '/job?id=1'; do
                curl -s -u bench:bench -H 'X-Onceq-Live: 1' -o /dev/null '$base'\$p &
            done
            sleep 5; done" >/dev/null 2>&1 &
        local viewers=$!
        open+=("$(cycle)")
        kill "$viewers" 2>/dev/null || true
        wait "$viewers" 2>/dev/null || true
        if ! ((r % 2)); then closed+=("$(cycle)"); fi
        echo "run $r: closed ${closed[-1]} jobs/s, open ${open[-1]} jobs/s" >&2
    done
    local mc mo
    mc=$(printf '%s\n' "${closed[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    mo=$(printf '%s\n' "${open[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    echo "cost: noop cycle, $JOBS jobs, $WORKERS workers, median of $REPEATS runs each"
    echo "closed ${mc} jobs/s  open ${mo} jobs/s  ratio open/closed" \
        "$(awk -v a="$mo" -v b="$mc" 'BEGIN { printf "%.3f", a / b }')"
    stop_broker
}

case $PART in
pages) pages ;;
cost) cost ;;
both) pages; cost ;;
*) echo "web_run.sh: part is pages, cost or both" >&2; exit 2 ;;
esac
