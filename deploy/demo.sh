#!/usr/bin/env bash
# The onceq demo, the article's scenario: installs what is needed, builds,
# starts the project-local PostgreSQL cluster, a broker and a pool of workers,
# registers customers, confirms orders — each dispatches "grant its points"
# and "request its shipment" (some orders twice, as a double-clicked button or
# a retried request would) — against a mock carrier API with faults on (503s,
# replies dropped after processing), kills workers with SIGKILL in the middle
# of their jobs, and finally compares the expected balances, grants and
# duplicates with the database and the broker, and the shipments with the
# carrier's own record (exactly one per order, or the order in review).
# Exits non-zero if anything differs.
#
#   ORDERS=300 REDISPATCH_PCT=30 CUSTOMERS=20 WORKERS=4 KILLS=3 bash deploy/demo.sh
#   CARRIER_ERROR_RATE=0.1 CARRIER_DROP_RATE=0.1 SHIPMENT_TRIES=10 (the carrier's faults)
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
carrier_error_rate=${CARRIER_ERROR_RATE:-0.1}
carrier_drop_rate=${CARRIER_DROP_RATE:-0.1}
shipment_tries=${SHIPMENT_TRIES:-10}

bash deploy/install-deps.sh
echo "== building"
BUILD_DIR=$top/build bash deploy/build.sh >/dev/null
bin=$top/build/bin
export PATH=$bin:$PATH

run=$(mktemp -d /tmp/onceq-demo-XXXXXX)
# Every process the demo starts in the background goes into pids as soon as
# it is started; the cleanup stops them by pid (TERM, then KILL after 10 s),
# whether the demo passed, failed mid-way or was stopped (bash runs the EXIT
# trap on TERM and INT too).
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
sql "TRUNCATE point_grants, point_balances, shipment_requests"

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
  pids+=("$broker")
  sleep 0.3
  if kill -0 "$broker" 2>/dev/null && onceq ping >/dev/null 2>&1; then break; fi
  kill "$broker" 2>/dev/null || true
  wait "$broker" 2>/dev/null || true
  unset 'pids[-1]' # gone: its pid must not be signalled again once reused
  broker=""
done
[ -n "$broker" ] || { echo "demo: could not start the broker"; cat "$run/broker.log"; exit 1; }
echo "== broker on $ONCEQ_BROKER (workers on $back), CURVE; logs in $run"

# The carrier's API (onceq-carrier, the mock of docs/carrier.md), with faults
# on: some requests answered 503, some processed and their reply dropped.
: >"$run/carrier.log"
onceq-carrier --port 0 --error-rate "$carrier_error_rate" --drop-reply-rate "$carrier_drop_rate" \
  >"$run/carrier.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do grep -q "listening on" "$run/carrier.log" && break; sleep 0.1; done
carrier_url=http://$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$run/carrier.log" | head -n 1)
[ "$carrier_url" != http:// ] || { echo "demo: the carrier did not start"; cat "$run/carrier.log"; exit 1; }
echo "== carrier API on $carrier_url ($carrier_error_rate of requests answered 503, $carrier_drop_rate processed with the reply dropped)"

# onceq-test-worker: onceq-worker plus the test hooks that let a few orders
# SIGKILL their worker between COMMIT and ack (docs/points.md, "Test hooks").
ONCEQ_TEST_HOOKS=1 onceq-test-worker --broker "$back" --processes "$workers" \
  --carrier-url "$carrier_url" >"$run/workers.log" 2>&1 &
pids+=("$!")
stats() { onceq stats --json; }
for _ in $(seq 100); do
  [ "$(stats | jq '.broker.workers')" -ge "$workers" ] && break
  sleep 0.1
done
echo "== $workers workers connected"

# Orders: each for a random customer and amount; some dispatched again.
declare -A expected order_customer order_points
for c in $(seq "$customers"); do expected[$c]=0; done
distinct=0; redispatched=0; dispatched=0; killed=0
: >"$run/dispatches"
: >"$run/shipments"
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
  echo "{\"order_id\": $order, \"address\": \"$o Demo Street\"}" >>"$run/shipments"
  dispatched=$((dispatched + 1))
  if [ $((RANDOM % 100)) -lt "$redispatch_pct" ]; then
    again=$((100000 + 1 + RANDOM % o))
    echo "{\"order_id\": $again, \"customer_id\": ${order_customer[$again]}, \"points\": ${order_points[$again]}, \"test_pause_in_txn_ms\": $hold_ms}" >>"$run/dispatches"
    echo "{\"order_id\": $again, \"address\": \"$((again - 100000)) Demo Street\"}" >>"$run/shipments"
    dispatched=$((dispatched + 1)); redispatched=$((redispatched + 1))
  fi
done

echo "== confirming $distinct orders (grant its points, request its shipment), $redispatched of them a second time, while killing workers"
# An order's confirmation dispatches both jobs; shipments go to their own
# queue with room for the carrier's faults (503s retried with backoff).
# The dispatcher runs each `onceq dispatch` as a child it waits for, and
# stops the one in flight when it is stopped itself: the cleanup's TERM
# reaches a shell, which would otherwise leave its child dispatching on
# after the demo ended. (A trapped TERM interrupts `wait`, not a command in
# the foreground.)
paste -d '\n' "$run/dispatches" "$run/shipments" >"$run/confirmations"
confirm_all() {
  local child=""
  trap '[ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child"; }; exit 143' TERM
  while read -r grant && read -r ship; do
    onceq dispatch grant_points --payload "$grant" >/dev/null &
    child=$!
    wait "$child"
    onceq dispatch request_shipment --queue shipments --max-tries "$shipment_tries" --backoff 1 \
      --timeout 10 --payload "$ship" >/dev/null &
    child=$!
    wait "$child"
  done <"$run/confirmations"
}
confirm_all &
dispatcher=$!
pids+=("$dispatcher")
# Meanwhile, kill a worker that holds a job, now and then.
while kill -0 "$dispatcher" 2>/dev/null; do
  if [ "$killed" -lt "$kills" ]; then
    victim=$(stats | jq -r '[.workers[] | select(.leased > 0) | .pid][0] // empty')
    # The victim may have gone in the meantime (a worker the demo's own
    # hook kills after COMMIT): then look again.
    if [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null; then
      killed=$((killed + 1))
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
  shipped=$(jq '[.queues[] | select(.name=="shipments") | (.done + .failed + .review)][0] // 0' <<<"$s")
  [ "$settled" -ge "$dispatched" ] && [ "$shipped" -ge "$dispatched" ] && break
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

# The carrier's own record: one shipment per order, or the order in review.
carrier=$(curl -fsS "$carrier_url/shipments")
sq=$(jq '.queues[] | select(.name=="shipments")' <<<"$s")
ship_done=$(jq .done <<<"$sq"); ship_failed=$(jq .failed <<<"$sq"); ship_review=$(jq .review <<<"$sq")
shipments=$(jq '.count' <<<"$carrier")
shipment_orders=$(jq '[.shipments[].order_id] | unique | length' <<<"$carrier")
posts=$(jq '.totals.posts' <<<"$carrier")
review_orders=$(onceq review list --queue shipments --json | jq '[.jobs[].payload.order_id] | unique | length')
confirmed_rows=$(sql "SELECT count(*) FROM shipment_requests WHERE status = 'confirmed'")

row() { printf "  %-42s %10s %10s  %s\n" "$1" "$2" "$3" "$([ "$2" = "$3" ] && echo ok || echo DIFFERS)"; [ "$2" = "$3" ] || bad=1; }
echo
printf "  %-42s %10s %10s\n" "" expected actual
row "jobs completed" "$dispatched" "$done_count"
row "jobs failed" 0 "$failed"
row "grant rows (one per order)" "$distinct" "$grants"
row "distinct orders granted" "$distinct" "$grant_orders"
row "completions: applied + duplicates" "$done_count" "$((applied + duplicates))"
row "total points over all balances" "$total_expected" "$total_actual"
row "customers with a wrong balance" 0 "$wrong_balances"
row "shipment jobs completed or in review" "$dispatched" "$((ship_done + ship_review))"
row "shipment jobs failed" 0 "$ship_failed"
row "orders shipped or in review" "$distinct" "$((shipment_orders + review_orders))"
row "shipments at the carrier (one per order)" "$shipment_orders" "$shipments"
row "confirmed shipment rows" "$((distinct - review_orders))" "$confirmed_rows"
printf "  %-42s %10s %10s\n" "orders dispatched twice" "" "$redispatched"
printf "  %-42s %10s %10s\n" "duplicates absorbed by the UNIQUE" "" "$duplicates"
printf "  %-42s %10s %10s\n" "workers killed mid-job" "" "$killed"
printf "  %-42s %10s %10s\n" "workers killed after COMMIT" "" "$(grep -c 'SIGKILL after commit' "$run/workers.log" || true)"
printf "  %-42s %10s %10s\n" "jobs redelivered" "" "$redelivered"
printf "  %-42s %10s %10s\n" "carrier requests (POSTs)" "" "$posts"
printf "  %-42s %10s %10s\n" "  answered 503 / reply dropped" "" "$(jq '"\(.totals.injected_errors) / \(.totals.dropped_replies)"' -r <<<"$carrier")"
printf "  %-42s %10s %10s\n" "requests per key: max / mean" "" \
  "$(jq -r '[.shipments[].requests] | if length == 0 then "0 / 0" else "\(max) / \(add / length * 100 | round / 100)" end' <<<"$carrier")"
printf "  %-42s %10s %10s\n" "shipment jobs in review" "" "$ship_review"
if [ "$ship_review" -gt 0 ]; then
  onceq review list --queue shipments --json | jq -r '.jobs[] | "    job \(.id) order \(.payload.order_id): \(.reason)"'
fi
echo
if [ "$bad" = 0 ]; then
  echo "PASS: every order granted exactly once, every balance exact, one shipment per order at the carrier"
  echo "      (or in review), despite $killed workers killed mid-job,"
  echo "      $(grep -c 'SIGKILL after commit' "$run/workers.log" || true) killed between COMMIT and ack, and $redispatched re-dispatched orders"
else
  echo "FAIL: see the rows marked DIFFERS"
  exit 1
fi
