#!/usr/bin/env bash
# The onceq demo, the article's scenario: installs what is needed, builds,
# starts the project-local PostgreSQL cluster, a broker and a pool of workers,
# registers customers, dispatches order-point grants (some orders dispatched
# twice, as a double-clicked button or a retried request would), kills
# workers with SIGKILL in the middle of their jobs, and finally compares the
# expected balances, grants and duplicates with what is in the database and
# the broker. Exits non-zero if anything differs.
#
#   ORDERS=300 REDISPATCH_PCT=30 CUSTOMERS=20 WORKERS=4 KILLS=3 bash deploy/demo.sh
#
# To make the kills land inside transactions the workers run with their test
# hooks on: each grant holds its transaction open for HOLD_MS (default 30)
# after its INSERT, as a slower real handler would, and KILL_AFTER_COMMIT
# orders (default 5) make their worker SIGKILL itself right after COMMIT and
# before the ack: the article's worst case, a job that ran and whose ack
# never came.
#
# ONCEQ_DATABASE_URL points the demo at an existing server instead of the
# local cluster (its point tables are emptied first).
#
# Everything speaks CURVE, as in production: the demo makes the broker's key
# pair and an admin and a worker key in its run directory (onceq keygen), and
# exports ONCEQ_KEY, ONCEQ_WORKER_KEY and ONCEQ_BROKER_KEY for the onceq tool
# and the workers.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

orders=${ORDERS:-300}
redispatch_pct=${REDISPATCH_PCT:-30}
customers=${CUSTOMERS:-20}
workers=${WORKERS:-4}
kills=${KILLS:-3}
hold_ms=${HOLD_MS:-30}
kill_after_commit=${KILL_AFTER_COMMIT:-5}

bash deploy/install-deps.sh
echo "== building"
BUILD_DIR=$top/build bash deploy/build.sh >/dev/null
bin=$top/build/bin
export PATH=$bin:$PATH

run=$(mktemp -d /tmp/onceq-demo-XXXXXX)
pids=()
own_pg=0
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ "$own_pg" = 1 ]; then bash "$top/deploy/pg.sh" stop "$pg_dir" || true; fi
}
trap cleanup EXIT

if [ -z "${ONCEQ_DATABASE_URL:-}" ]; then
  pg_dir=$run/pg
  chmod 755 "$run"
  export ONCEQ_PG_PORT=${ONCEQ_PG_PORT:-$((40000 + RANDOM % 20000))}
  echo "== starting the local PostgreSQL cluster in $pg_dir (port $ONCEQ_PG_PORT)"
  ONCEQ_BIN=$bin/onceq bash deploy/pg.sh start "$pg_dir"
  own_pg=1
  export ONCEQ_DATABASE_URL=$(bash deploy/pg.sh url "$pg_dir")
else
  onceq db migrate
fi
sql() { psql "$ONCEQ_DATABASE_URL" -qAtX -c "$1"; }
sql "TRUNCATE point_grants, point_balances"

echo "== making keys in $run/keys (broker, an admin, a worker)"
onceq keygen --dir "$run/keys" broker >/dev/null 2>&1
onceq keygen --dir "$run/client-keys" demo-admin >/dev/null 2>&1
onceq keygen --dir "$run/client-keys" demo-worker >/dev/null 2>&1
mkdir -p "$run/keys/admins" "$run/keys/workers"
mv "$run/client-keys/demo-admin.key" "$run/keys/admins/"
mv "$run/client-keys/demo-worker.key" "$run/keys/workers/"
export ONCEQ_KEY=$run/client-keys/demo-admin.key_secret
export ONCEQ_WORKER_KEY=$run/client-keys/demo-worker.key_secret
export ONCEQ_BROKER_KEY=$run/keys/broker.key

echo "== registering $customers customers"
for c in $(seq "$customers"); do onceq customer add "$c" >/dev/null; done

# Pick a free pair of loopback ports: the broker refuses a used one.
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 20000))
  export ONCEQ_BROKER=tcp://127.0.0.1:$port
  back=tcp://127.0.0.1:$((port + 1))
  onceq-broker --front "$ONCEQ_BROKER" --back "$back" --heartbeat-ms 250 --data-dir "$run/data" \
    --keys "$run/keys" >"$run/broker.log" 2>&1 &
  broker=$!
  sleep 0.3
  if kill -0 "$broker" 2>/dev/null && onceq ping >/dev/null 2>&1; then break; fi
  kill "$broker" 2>/dev/null || true
  broker=""
done
[ -n "$broker" ] || { echo "demo: could not start the broker"; cat "$run/broker.log"; exit 1; }
pids+=("$broker")
echo "== broker on $ONCEQ_BROKER (workers on $back), CURVE; logs in $run"

# onceq-test-worker: onceq-worker plus the test hooks that let a few orders
# SIGKILL their worker between COMMIT and ack (docs/points.md, "Test hooks").
ONCEQ_TEST_HOOKS=1 onceq-test-worker --broker "$back" --processes "$workers" >"$run/workers.log" 2>&1 &
pids+=("$!")
stats() { onceq stats --json; }
for _ in $(seq 100); do
  [ "$(stats | jq '.workers | length')" -ge "$workers" ] && break
  sleep 0.1
done
echo "== $workers workers connected"

# Orders: each for a random customer and amount; some dispatched again.
declare -A expected order_customer order_points
for c in $(seq "$customers"); do expected[$c]=0; done
distinct=0; redispatched=0; dispatched=0; killed=0
: >"$run/dispatches"
for o in $(seq "$orders"); do
  order=$((100000 + o))
  c=$((1 + RANDOM % customers)); p=$((1 + RANDOM % 100))
  order_customer[$order]=$c; order_points[$order]=$p
  expected[$c]=$((expected[$c] + p))
  distinct=$((distinct + 1))
  hooks=", \"test_pause_in_txn_ms\": $hold_ms"
  if [ $((o % (orders / (kill_after_commit + 1) + 1))) -eq 0 ]; then
    hooks="$hooks, \"test_kill_after_commit_attempt\": 1"
  fi
  echo "{\"order_id\": $order, \"customer_id\": $c, \"points\": $p$hooks}" >>"$run/dispatches"
  dispatched=$((dispatched + 1))
  if [ $((RANDOM % 100)) -lt "$redispatch_pct" ]; then
    again=$((100000 + 1 + RANDOM % o))
    echo "{\"order_id\": $again, \"customer_id\": ${order_customer[$again]}, \"points\": ${order_points[$again]}, \"test_pause_in_txn_ms\": $hold_ms}" >>"$run/dispatches"
    dispatched=$((dispatched + 1)); redispatched=$((redispatched + 1))
  fi
done

echo "== dispatching $distinct orders, $redispatched of them a second time, while killing workers"
while read -r payload; do
  onceq dispatch grant_points --payload "$payload" >/dev/null
done <"$run/dispatches" &
dispatcher=$!
pids+=("$dispatcher")
# Meanwhile, kill a worker that holds a job, now and then.
while kill -0 "$dispatcher" 2>/dev/null; do
  if [ "$killed" -lt "$kills" ]; then
    victim=$(stats | jq -r '[.workers[] | select(.leased > 0) | .pid][0] // empty')
    if [ -n "$victim" ]; then
      kill -KILL "$victim"; killed=$((killed + 1))
      echo "   killed worker pid $victim with SIGKILL mid-job"
      sleep 1
    fi
  else
    sleep 0.2
  fi
done
wait "$dispatcher"

echo "== waiting for the pool to drain"
deadline=$((SECONDS + 180))
while :; do
  s=$(stats)
  settled=$(jq '[.queues[] | select(.name=="default") | (.done + .failed)][0] // 0' <<<"$s")
  [ "$settled" -ge "$dispatched" ] && break
  if [ $SECONDS -gt $deadline ]; then echo "demo: jobs did not settle in time"; break; fi
  sleep 0.3
done
sleep 0.5
s=$(stats)
q=$(jq '.queues[] | select(.name=="default")' <<<"$s")
t=$(jq '.types[] | select(.name=="grant_points")' <<<"$s")
done_count=$(jq .done <<<"$q"); failed=$(jq .failed <<<"$q"); redelivered=$(jq .redelivered <<<"$q")
applied=$(jq .applied <<<"$t"); duplicates=$(jq .duplicates <<<"$t")
grants=$(sql "SELECT count(*) FROM point_grants")
grant_orders=$(sql "SELECT count(DISTINCT order_id) FROM point_grants")

bad=0
wrong_balances=0
while IFS='|' read -r c b; do
  if [ "$b" != "${expected[$c]}" ]; then
    wrong_balances=$((wrong_balances + 1))
    echo "   customer $c: expected ${expected[$c]}, actual $b"
  fi
done < <(sql "SELECT customer_id, balance FROM point_balances ORDER BY customer_id")
total_expected=0; for c in "${!expected[@]}"; do total_expected=$((total_expected + expected[$c])); done
total_actual=$(sql "SELECT coalesce(sum(balance), 0) FROM point_balances")

row() { printf "  %-34s %10s %10s  %s\n" "$1" "$2" "$3" "$([ "$2" = "$3" ] && echo ok || echo DIFFERS)"; [ "$2" = "$3" ] || bad=1; }
echo
printf "  %-34s %10s %10s\n" "" expected actual
row "jobs completed" "$dispatched" "$done_count"
row "jobs failed" 0 "$failed"
row "grant rows (one per order)" "$distinct" "$grants"
row "distinct orders granted" "$distinct" "$grant_orders"
row "completions: applied + duplicates" "$done_count" "$((applied + duplicates))"
row "total points over all balances" "$total_expected" "$total_actual"
row "customers with a wrong balance" 0 "$wrong_balances"
printf "  %-34s %10s %10s\n" "orders dispatched twice" "" "$redispatched"
printf "  %-34s %10s %10s\n" "duplicates absorbed by the UNIQUE" "" "$duplicates"
printf "  %-34s %10s %10s\n" "workers killed mid-job" "" "$killed"
printf "  %-34s %10s %10s\n" "workers killed after COMMIT" "" "$(grep -c 'SIGKILL after commit' "$run/workers.log" || true)"
printf "  %-34s %10s %10s\n" "jobs redelivered" "" "$redelivered"
echo
if [ "$bad" = 0 ]; then
  echo "PASS: every order granted exactly once, every balance exact, despite $killed workers killed mid-job,"
  echo "      $(grep -c 'SIGKILL after commit' "$run/workers.log" || true) killed between COMMIT and ack, and $redispatched re-dispatched orders"
else
  echo "FAIL: see the rows marked DIFFERS"
  exit 1
fi
