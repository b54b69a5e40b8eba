#!/usr/bin/env bash
# php.laravel: the Laravel queue driver (clients/laravel) under Laravel's
# own `php artisan queue:work onceq`, in the minimal artisan app of
# tests/app, against a CURVE broker on free loopback ports, a C
# onceq-worker (queue "c") and a project-local PostgreSQL. The cases are
# tests/LaravelQueueTest.php; each starts its own queue:work processes.
#
# Every process it starts (and every worker the tests start, listed in
# $work/pids) is stopped by PID, the cluster is stopped and the temp dir
# removed on any exit (ONCEQ_KEEP_TEST_DIR=1 keeps it). Exits 77 (skipped)
# without php, its modules or Debian's php-laravel-framework, unless CI=true.
#
#   bash clients/laravel/tests/run.sh SOURCE_DIR BUILD_DIR [PHPUNIT_FILTER]
set -euo pipefail
src=$(cd "${1:?usage: run.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
build=$(cd "${2:?usage: run.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
filter=${3:-}
bin=$build/bin
wait_s=60
stop_s=20

unset ONCEQ_DATABASE_URL ONCEQ_PG_DIR ONCEQ_WORKER_BROKER ONCEQ_BROKER ONCEQ_KEYS ONCEQ_KEY \
  ONCEQ_WORKER_KEY ONCEQ_BROKER_KEY ONCEQ_ADMIN_KEY ONCEQ_INSECURE ONCEQ_QUEUE ONCEQ_WORKER_NAME \
  QUEUE_CONNECTION ONCEQ_KEEPER ONCEQ_BLOCK_FOR

log() { echo "php.laravel: $*" >&2; }

missing=""
command -v php >/dev/null || missing="php-cli"
command -v phpunit >/dev/null || missing="$missing phpunit"
if command -v php >/dev/null; then
  modules=$(php -m)
  for m in zmq msgpack pdo_pgsql pcntl posix; do
    grep -qx "$m" <<<"$modules" || missing="$missing php-$m"
  done
fi
[ -f /usr/share/php/Illuminate/Foundation/Application.php ] || missing="$missing php-laravel-framework"
if [ -n "$missing" ]; then
  log "missing:$missing (deploy/install-deps.sh installs them)"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-laravel-XXXXXX")
chmod 755 "$work" # as root the cluster runs as postgres, which must reach it
pids=()
pg_started=0
: >"$work/pids"

alive() {
  [ -r "/proc/$1/stat" ] || return 1
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ "$state" != Z ]
}

stop_pid() {
  local pid=$1 end=$((SECONDS + stop_s))
  kill -TERM "$pid" 2>/dev/null || true
  while alive "$pid" && [ $SECONDS -lt $end ]; do sleep 0.1; done
  if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  # Workers (and their keepers) the tests started and did not stop.
  while read -r pid; do
    if [ -n "$pid" ] && alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done <"$work/pids"
  for pid in "${pids[@]}"; do
    if alive "$pid"; then stop_pid "$pid"; fi
  done
  if [ "$pg_started" = 1 ]; then
    ONCEQ_BIN=$bin/onceq ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" stop "$work/pg" >/dev/null 2>&1 ||
      log "could not stop the cluster in $work/pg"
  fi
  if [ $rc -ne 0 ]; then
    for f in "$work"/*.log; do
      [ -f "$f" ] || continue
      echo "---- ${f#"$work"/} (last 30 lines)" >&2
      tail -n 30 "$f" >&2
    done
  fi
  if [ -n "${ONCEQ_KEEP_TEST_DIR:-}" ]; then log "kept $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
  perl -MIO::Socket::INET -e \
    'my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0) or die "$!\n";
     print $s->sockport, "\n";'
}

wait_for() {
  local what=$1 end=$((SECONDS + wait_s))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || { log "FAIL: $what: not within ${wait_s}s"; exit 1; }
    sleep 0.1
  done
}

# ---- the database --------------------------------------------------------
pg_port=$(free_port)
pg_started=1
ONCEQ_BIN=$bin/onceq ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" start "$work/pg" >"$work/pg.log" 2>&1 ||
  { log "FAIL: pg.sh start"; exit 1; }
url=$(ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" url "$work/pg")
for c in 1 2 3 4 5 6; do
  "$bin/onceq" customer add "$c" --database "$url" >>"$work/customers.log" 2>&1 ||
    { log "FAIL: onceq customer add $c"; exit 1; }
done

# ---- keys ----------------------------------------------------------------
keys=$work/keys
me=$work/me
"$bin/onceq" keygen --dir "$keys" broker >"$work/keygen.log" 2>&1
for name in app admin laravel-worker c-worker; do
  "$bin/onceq" keygen --dir "$me" "$name" >>"$work/keygen.log" 2>&1
done
mkdir -p "$keys/producers" "$keys/workers" "$keys/admins"
cp "$me/app.key" "$keys/producers/"
cp "$me/admin.key" "$keys/admins/"
cp "$me/laravel-worker.key" "$me/c-worker.key" "$keys/workers/"

# ---- the broker (heartbeat 1 s x liveness 3) and a C worker ---------------
front=tcp://127.0.0.1:$(free_port)
back=tcp://127.0.0.1:$(free_port)
"$bin/onceq-broker" --front "$front" --back "$back" --data-dir "$work/data" --keys "$keys" \
  >"$work/broker.log" 2>&1 &
pids+=($!)
wait_for "the broker answering a ping" "$bin/onceq" ping --broker "$front" \
  --key "$me/admin.key_secret" --broker-key "$keys/broker.key"

"$bin/onceq-worker" --broker "$back" --name c-worker --queue c --database "$url" \
  --key "$me/c-worker.key_secret" --broker-key "$keys/broker.key" >"$work/c-worker.log" 2>&1 &
pids+=($!)

# ---- phpunit -------------------------------------------------------------
# The app's environment: the connection's endpoints and keys (config/queue.php).
export APP_STORAGE=$work/storage ONCEQ_BROKER=$front ONCEQ_WORKER_BROKER=$back \
  ONCEQ_KEY=$me/app.key_secret ONCEQ_WORKER_KEY=$me/laravel-worker.key_secret \
  ONCEQ_ADMIN_KEY=$me/admin.key_secret ONCEQ_BROKER_KEY=$keys/broker.key \
  ONCEQ_TEST_DATABASE=$url ONCEQ_TEST_WORK=$work ONCEQ_TEST_BIN=$bin
cd "$src/clients/laravel"
args=(--configuration phpunit.xml.dist --do-not-cache-result)
[ -n "$filter" ] && args+=(--filter "$filter")
phpunit "${args[@]}" 2>&1 | tee "$work/phpunit.log" >&2
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || { log "FAIL: phpunit exited with $status"; exit 1; }
log "ok"
