#!/usr/bin/env bash
# php.client: the PHP client and worker (clients/php) against the real
# broker, onceq-worker, the onceq tool and a project-local PostgreSQL:
#
#   - unit tests of the codec (uint64 lease tokens, empty maps), the zcert
#     reader, the error classes, and Client::dispatchWait() against a
#     scripted stand-in for the broker (tests/support/); against the same
#     stand-in, a broker sending malformed replies and deliveries, and a
#     seeded stream of random and mutated frames (also run alone, without
#     PostgreSQL, as hostile.php_malformed_broker: tests/run-unit.sh);
#   - a grant dispatched from PHP runs in C (onceq-worker, queue "c"), one
#     dispatched with `onceq dispatch` runs in PHP (examples/points-worker.php,
#     queue "php"), on the same tables;
#   - a PHP worker SIGKILLed right after its COMMIT: the job is delivered
#     again, reports already_applied, and the balance is exact;
#   - dispatchWait(): done, failed, pending (a type no worker takes), and
#     a unique_key's holder answered apart by a wait;
#   - the errors a client can provoke: too_large, bad_request, timeout_rule,
#     forbidden (a worker key on the front), not_found, and a broker that
#     does not exist (TimeoutException).
#
# Every process it starts (and every worker the tests start, listed in
# $work/pids) is stopped by PID, the cluster is stopped and the temp dir
# removed on any exit (ONCEQ_KEEP_TEST_DIR=1 keeps it). Exits 77 (skipped)
# without php and its modules, unless CI=true.
#
#   bash clients/php/tests/run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "${1:?usage: run.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
build=$(cd "${2:?usage: run.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
bin=$build/bin
wait_s=60
stop_s=20

unset ONCEQ_DATABASE_URL ONCEQ_PG_DIR ONCEQ_WORKER_BROKER ONCEQ_BROKER ONCEQ_KEYS ONCEQ_KEY \
  ONCEQ_WORKER_KEY ONCEQ_BROKER_KEY ONCEQ_INSECURE ONCEQ_QUEUE ONCEQ_WORKER_NAME

log() { echo "php.client: $*" >&2; }

missing=""
command -v php >/dev/null || missing="php-cli"
command -v phpunit >/dev/null || missing="$missing phpunit"
if command -v php >/dev/null; then
  modules=$(php -m)
  for m in zmq msgpack pdo_pgsql pcntl posix; do
    grep -qx "$m" <<<"$modules" || missing="$missing php-$m"
  done
fi
if [ -n "$missing" ]; then
  log "missing:$missing (deploy/install-deps.sh installs them)"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-php-XXXXXX")
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
  # Workers the PHP tests started and did not stop (phpunit killed, a fatal error).
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
for name in app admin php-worker c-worker; do
  "$bin/onceq" keygen --dir "$me" "$name" >>"$work/keygen.log" 2>&1
done
mkdir -p "$keys/producers" "$keys/workers" "$keys/admins"
cp "$me/app.key" "$keys/producers/"
cp "$me/admin.key" "$keys/admins/"
cp "$me/php-worker.key" "$me/c-worker.key" "$keys/workers/"

# ---- the broker and a C worker -------------------------------------------
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
export ONCEQ_TEST_FRONT=$front ONCEQ_TEST_BACK=$back ONCEQ_TEST_DATABASE=$url \
  ONCEQ_TEST_KEYS=$keys ONCEQ_TEST_ME=$me ONCEQ_TEST_WORK=$work ONCEQ_TEST_BIN=$bin
cd "$src/clients/php"
phpunit --configuration phpunit.xml.dist --do-not-cache-result 2>&1 | tee "$work/phpunit.log" >&2
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || { log "FAIL: phpunit exited with $status"; exit 1; }
log "ok"
