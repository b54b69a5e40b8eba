#!/usr/bin/env bash
# A database outage under load: how many jobs does it cost?
#
#   tests/bench/outage_run.sh [BUILD_DIR]
#
# Grants are dispatched at RATE a second (default 30) to WORKERS worker
# processes (default 4), with the jobs' default retry budget (3 tries, 10 s
# backoff). After WARM_S seconds (default 20) the project-local PostgreSQL
# cluster is stopped (pg.sh stop: pg_ctl stop -m fast) for OUTAGE_S seconds
# (default 60) while grants keep coming, then started again; dispatching
# goes on for AFTER_S seconds (default 20). Then the run waits (at most
# SETTLE_S, default 240) until no job is ready, delayed or leased, and
# prints one line of key=value: jobs dispatched, done, failed (and of those
# dispatched during the outage), retried, returned (handed back unrun), and
# whether the effects are exact (one grant row per done order, balances
# summing to the grants). It is a measurement, not a test: nothing here is
# registered with ctest. BUILD_DIR may be a build of another revision (the
# script and pg.sh are this tree's).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-${BUILD:-$top/build}}" && pwd)
bin=$build/bin
rate=${RATE:-30}
workers=${WORKERS:-4}
warm_s=${WARM_S:-20}
outage_s=${OUTAGE_S:-60}
after_s=${AFTER_S:-20}
settle_s=${SETTLE_S:-240}
customers=100

run=$(mktemp -d /tmp/onceq-outage-XXXXXX)
chmod 755 "$run"
broker_pid=
worker_pid=
cleanup() {
  for p in $worker_pid $broker_pid; do
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  bash "$top/deploy/pg.sh" stop "$run/pg" >/dev/null 2>&1 || true
  if [[ -z ${KEEP:-} ]]; then rm -rf "$run"; else echo "kept $run" >&2; fi
}
trap cleanup EXIT

# A random port; another one if it is taken.
for try in 1 2 3; do
  export ONCEQ_PG_PORT=$((40000 + RANDOM % 20000))
  if ONCEQ_BIN=$bin/onceq bash "$top/deploy/pg.sh" start "$run/pg" >>"$run/pg.log" 2>&1; then
    break
  fi
  ((try < 3)) || { echo "outage_run.sh: the cluster did not start; see $run/pg.log" >&2; exit 1; }
done
export ONCEQ_DATABASE_URL=$(bash "$top/deploy/pg.sh" url "$run/pg")
psql "$ONCEQ_DATABASE_URL" -qAtX -c "INSERT INTO point_balances (customer_id, balance)
  SELECT g, 0 FROM generate_series(1, $customers) g ON CONFLICT DO NOTHING"

# Plaintext on loopback: this measures the database's outage, not CURVE. A
# build from before CURVE has no such flag, and speaks plaintext anyway.
auth=()
if "$bin/onceq-broker" --help | grep -q -- '--insecure '; then auth=(--insecure); fi
for try in 1 2 3; do
  port=$((20000 + RANDOM % 20000))
  front=tcp://127.0.0.1:$port
  back=tcp://127.0.0.1:$((port + 1))
  export ONCEQ_BROKER=$front
  "$bin/onceq-broker" "${auth[@]}" --front "$front" --back "$back" --data-dir "$run/data" \
    >>"$run/broker.log" 2>&1 &
  broker_pid=$!
  until "$bin/onceq" ping >/dev/null 2>&1 || ! kill -0 "$broker_pid" 2>/dev/null; do sleep 0.1; done
  kill -0 "$broker_pid" 2>/dev/null && break
  ((try < 3)) || { echo "outage_run.sh: the broker did not start; see $run/broker.log" >&2; exit 1; }
done
"$bin/onceq-worker" --broker "$back" --processes "$workers" >"$run/workers.log" 2>&1 &
worker_pid=$!

now_ms() { echo $(($(date +%s%N) / 1000000)); }
order=0
# dispatch_for SECONDS: grants at $rate a second, paced by the clock.
dispatch_for() {
  local start end now due
  start=$(now_ms)
  end=$((start + $1 * 1000))
  while now=$(now_ms) && ((now < end)); do
    due=$(((now - start) * rate / 1000))
    while ((order - base < due)); do
      order=$((order + 1))
      "$bin/onceq" dispatch grant_points --payload \
        "{\"order_id\": $order, \"customer_id\": $((1 + order % customers)), \"points\": 1}" \
        >/dev/null
    done
    sleep 0.01
  done
  base=$order
}
# stat KEY: the first "KEY":N of the stats reply (the default queue's).
stat() { "$bin/onceq" stats --json | grep -o "\"$1\":[0-9]*" | head -1 | cut -d: -f2; }

base=0
dispatch_for "$warm_s"
first_outage=$((order + 1))
bash "$top/deploy/pg.sh" stop "$run/pg" >>"$run/pg.log" 2>&1
down_at=$(now_ms)
dispatch_for "$outage_s"
last_outage=$order
ONCEQ_BIN=$bin/onceq bash "$top/deploy/pg.sh" start "$run/pg" >>"$run/pg.log" 2>&1
up_at=$(now_ms)
down_ms=$((up_at - down_at))
dispatch_for "$after_s"

deadline=$(($(now_ms) + settle_s * 1000))
while (($(stat ready) + $(stat delayed) + $(stat leased) > 0)) && (($(now_ms) < deadline)); do
  sleep 1
done

done_jobs=$(stat done)
failed=$(stat failed)
# The failed jobs' orders, page by page (the next page starts after "next").
failed_orders() {
  local after=0 page next
  while :; do
    page=$("$bin/onceq" failed list --json --limit 1000 --after "$after")
    grep -o '"order_id":[0-9]*' <<<"$page" | cut -d: -f2
    next=$(grep -o '"next":[0-9]*' <<<"$page" | cut -d: -f2 || true)
    [[ -n $next ]] || break
    after=$next
  done
}
failed_outage=$(failed_orders | awk -v a="$first_outage" -v b="$last_outage" '$1 >= a && $1 <= b' | wc -l)
rows=$(psql "$ONCEQ_DATABASE_URL" -qAtX -c "SELECT count(*) FROM point_grants")
distinct=$(psql "$ONCEQ_DATABASE_URL" -qAtX -c "SELECT count(DISTINCT order_id) FROM point_grants")
balance=$(psql "$ONCEQ_DATABASE_URL" -qAtX -c "SELECT sum(balance) FROM point_balances")
# How long after the database was back the last paused worker took jobs
# again (workers that pause log "taking jobs again"; "-" if none did).
resume_ms=-
last=$(grep "taking jobs again" "$run/workers.log" | tail -1 | cut -d' ' -f1 || true)
if [[ -n $last ]]; then resume_ms=$(($(date -d "$last" +%s%3N) - up_at)); fi
exact=no
if ((rows == distinct && rows == done_jobs && balance == rows)); then exact=yes; fi
echo "dispatched=$order outage_jobs=$((last_outage - first_outage + 1)) down_ms=$down_ms" \
  "done=$done_jobs failed=$failed failed_pct=$(awk -v f="$failed" -v n="$order" 'BEGIN {printf "%.1f", 100 * f / n}')" \
  "failed_of_outage_jobs=$failed_outage retried=$(stat retried) returned=$(stat returned)" \
  "resume_ms=$resume_ms grant_rows=$rows balance_sum=$balance exact=$exact"
