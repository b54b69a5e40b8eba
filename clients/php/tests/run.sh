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

FLEET_NAME=php
FLEET_WORKER_KEY=php-worker
# shellcheck source=fleet.sh
. "$src/clients/php/tests/fleet.sh"

# ---- phpunit -------------------------------------------------------------
export ONCEQ_TEST_FRONT=$front ONCEQ_TEST_BACK=$back ONCEQ_TEST_DATABASE=$url \
  ONCEQ_TEST_KEYS=$keys ONCEQ_TEST_ME=$me ONCEQ_TEST_WORK=$work ONCEQ_TEST_BIN=$bin
cd "$src/clients/php"
phpunit --configuration phpunit.xml.dist --do-not-cache-result 2>&1 | tee "$work/phpunit.log" >&2
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || { log "FAIL: phpunit exited with $status"; exit 1; }
log "ok"
