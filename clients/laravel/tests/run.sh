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

FLEET_NAME=laravel
FLEET_WORKER_KEY=laravel-worker
# shellcheck source=../../php/tests/fleet.sh
. "$src/clients/php/tests/fleet.sh"

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
