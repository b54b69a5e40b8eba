#!/usr/bin/env bash
# Throughput of noop Laravel jobs through `php artisan queue:work`, for the
# onceq driver, Laravel's database driver (on PostgreSQL) and its Redis
# driver (Debian's redis-server, php-redis), with 1 and 4 workers, on this
# machine in one run. For each: push JOBS noop jobs, start W workers with
# --stop-when-empty, and time until all have exited; the same with no jobs
# gives the fixed cost (booting, the empty pop that ends them), taken off:
# jobs/s = JOBS / (T(JOBS) - T(0)). onceq speaks CURVE with its default
# fsync (always); the keeper is on. Prints one table row per driver and W.
#
#   bash clients/laravel/tests/bench.sh SOURCE_DIR BUILD_DIR
#
# Environment: JOBS (2000), WORKER_COUNTS ("1 4"), DRIVERS ("onceq database
# redis"). Every process it starts is stopped by PID on exit.
set -euo pipefail
src=$(cd "${1:?usage: bench.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
build=$(cd "${2:?usage: bench.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
bin=$build/bin
JOBS=${JOBS:-2000}
WORKER_COUNTS=${WORKER_COUNTS:-"1 4"}
DRIVERS=${DRIVERS:-"onceq database redis"}
RUN_DEADLINE_S=300
artisan=$src/clients/laravel/tests/app/artisan
if [[ " $DRIVERS " == *" redis "* ]] && ! { command -v redis-server >/dev/null && php -m | grep -qx redis; }; then
  echo "bench: skipping the redis driver: redis-server or php-redis is missing (ONCEQ_WITH_BENCH=1 deploy/install-deps.sh)" >&2
  DRIVERS=${DRIVERS//redis/}
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-laravel-bench-XXXXXX")
chmod 755 "$work"
pids=()
pg_port=""
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  [ -n "$pg_port" ] && ONCEQ_BIN=$bin/onceq ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" stop "$work/pg" >/dev/null 2>&1
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0)->sockport, "\n"'
}

pg_port=$(free_port)
ONCEQ_BIN=$bin/onceq ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" start "$work/pg" >"$work/pg.log" 2>&1
url=$(ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" url "$work/pg")
psql "$url" -qc "CREATE TABLE jobs (id bigserial PRIMARY KEY, queue varchar(255) NOT NULL, payload text NOT NULL,
  attempts smallint NOT NULL, reserved_at integer, available_at integer NOT NULL, created_at integer NOT NULL);
  CREATE INDEX jobs_queue_index ON jobs (queue);"

redis_port=$(free_port)
if [[ " $DRIVERS " == *" redis "* ]]; then
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
  pids+=($!)
fi

"$bin/onceq" keygen --dir "$work/keys" broker >/dev/null 2>&1
for n in app admin w; do "$bin/onceq" keygen --dir "$work/me" "$n" >/dev/null 2>&1; done
mkdir -p "$work/keys/producers" "$work/keys/workers" "$work/keys/admins"
cp "$work/me/app.key" "$work/keys/producers/"; cp "$work/me/admin.key" "$work/keys/admins/"
cp "$work/me/w.key" "$work/keys/workers/"
front=tcp://127.0.0.1:$(free_port)
back=tcp://127.0.0.1:$(free_port)
"$bin/onceq-broker" --front "$front" --back "$back" --data-dir "$work/data" --keys "$work/keys" >"$work/broker.log" 2>&1 &
pids+=($!)
sleep 1

export APP_STORAGE=$work/storage ONCEQ_BROKER=$front ONCEQ_WORKER_BROKER=$back \
  ONCEQ_KEY=$work/me/app.key_secret ONCEQ_WORKER_KEY=$work/me/w.key_secret \
  ONCEQ_ADMIN_KEY=$work/me/admin.key_secret ONCEQ_BROKER_KEY=$work/keys/broker.key \
  ONCEQ_TEST_DATABASE=$url REDIS_PORT=$redis_port QUEUE_FAILED_DRIVER=null

# Seconds for W workers to drain N jobs of DRIVER and exit.
drain_s() {
  local driver=$1 w=$2 n=$3 start end i wpids=()
  [ "$n" -gt 0 ] && php "$artisan" bench:push "$driver" "$n" >/dev/null
  start=$(date +%s.%N)
  for ((i = 0; i < w; i++)); do
    timeout "$RUN_DEADLINE_S" php "$artisan" queue:work "$driver" --queue=bench --sleep=0 --stop-when-empty \
      >>"$work/worker.log" 2>&1 &
    wpids+=($!)
  done
  for pid in "${wpids[@]}"; do wait "$pid" || true; done
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}

printf '| driver | workers | jobs | seconds | fixed cost s | jobs/s |\n|---|---|---|---|---|---|\n'
for driver in $DRIVERS; do
  for w in $WORKER_COUNTS; do
    fixed=$(drain_s "$driver" "$w" 0)
    total=$(drain_s "$driver" "$w" "$JOBS")
    rate=$(echo "$JOBS / ($total - $fixed)" | bc -l)
    printf '| %s | %d | %d | %.2f | %.2f | %.0f |\n' "$driver" "$w" "$JOBS" "$total" "$fixed" "$rate"
  done
done
