#!/usr/bin/env bash
# Does scraping /metrics slow the broker's loop? Runs run.sh twice with the
# same settings: once as it is, once with --metrics and a curl GET of
# /metrics every SCRAPE_MS (100) for as long as that run lasts (bounded by
# SCRAPE_DEADLINE_S). Prints both tables and, per worker count, the ratios
# scraped / plain of the medians. See README.md here, "Metrics".
#
#   tests/bench/metrics_run.sh [BUILD_DIR]
#
# Environment: what run.sh takes (JOBS, REPEATS, WORKER_COUNTS, INSECURE,
# ...), SCRAPE_MS (100), SCRAPE_DEADLINE_S (3600).
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
SCRAPE_MS=${SCRAPE_MS:-100}
SCRAPE_DEADLINE_S=${SCRAPE_DEADLINE_S:-3600}
HERE=$(cd "$(dirname "$0")" && pwd)
WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/onceq-metrics-bench.XXXXXX")
SCRAPER_PID=""

cleanup() {
    if [[ -n $SCRAPER_PID ]]; then
        kill "$SCRAPER_PID" 2>/dev/null || true
        wait "$SCRAPER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORKDIR"
}
trap cleanup EXIT
command -v curl >/dev/null || { echo "metrics_run.sh: curl not found" >&2; exit 1; }

# A free loopback port for the metrics (the kernel picks it; the broker
# binds it a moment later).
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT/metrics

echo "== plain: run.sh as it is" >&2
bash "$HERE/run.sh" "$BUILD" >"$WORKDIR/plain.txt"

echo "== scraped: --metrics 127.0.0.1:$PORT, GET $URL every $SCRAPE_MS ms" >&2
sleep_s=$(awk -v ms="$SCRAPE_MS" 'BEGIN { printf "%.3f", ms / 1000 }')
timeout "$SCRAPE_DEADLINE_S" bash -c "
    while :; do
        if curl -sf -o /dev/null --max-time 2 '$URL'; then echo ok; else echo miss; fi
        sleep $sleep_s
    done" >"$WORKDIR/scrapes.txt" 2>/dev/null &
SCRAPER_PID=$!
BROKER_FLAGS="--metrics 127.0.0.1:$PORT" bash "$HERE/run.sh" "$BUILD" >"$WORKDIR/scraped.txt"
kill "$SCRAPER_PID" 2>/dev/null || true
wait "$SCRAPER_PID" 2>/dev/null || true
SCRAPER_PID=""

echo "-- plain"
cat "$WORKDIR/plain.txt"
echo "-- scraped every $SCRAPE_MS ms: $(grep -c '^ok' "$WORKDIR/scrapes.txt" || true) scrapes answered," \
    "$(grep -c '^miss' "$WORKDIR/scrapes.txt" || true) missed (before the broker was up, between brokers)"
cat "$WORKDIR/scraped.txt"
echo
echo "ratios scraped / plain of the medians (j/s: below 1 is slower; p50, p99: above 1 is)."
echo "The scraper runs through the second run.sh's beanstalkd part too: beanstalkd's"
echo "ratio is the control, what the curl processes alone cost the machine."
printf "%-7s  %8s %8s %8s  %16s  %18s\n" workers "j/s x" "p50 x" "p99 x" "beanstalkd j/s x" "onceq / control"
# The rows of run.sh's table: workers, onceq j/s, p50, p99, beanstalkd j/s, ...
awk 'FNR == 1 { file++ }
     $1 ~ /^[0-9]+$/ && NF >= 5 { v[file, $1] = $2 " " $3 " " $4 " " $5; if (file == 1) order[++n] = $1 }
     END {
         for (i = 1; i <= n; i++) {
             w = order[i]; split(v[1, w], a, " "); split(v[2, w], b, " ")
             o = b[1] / a[1]; c = b[4] / a[4]
             printf "%-7s  %8.3f %8.3f %8.3f  %16.3f  %18.3f\n", w, o, b[2] / a[2], b[3] / a[3], c, o / c
         }
     }' "$WORKDIR/plain.txt" "$WORKDIR/scraped.txt"
