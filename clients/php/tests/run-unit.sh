#!/usr/bin/env bash
# The PHP client's unit tests alone, no broker and no PostgreSQL (the
# scripted stand-in plays the broker): php.client runs them too, with the
# integration suite. With a filter, only the matching test classes:
#
#   bash clients/php/tests/run-unit.sh SOURCE_DIR [PHPUNIT_FILTER]
#
# hostile.php_malformed_broker runs MalformedBrokerTest and DecoderFuzzTest
# this way. Exits 77 (skipped) without php and its modules, unless CI=true.
set -euo pipefail
src=$(cd "${1:?usage: run-unit.sh SOURCE_DIR [PHPUNIT_FILTER]}" && pwd -P)
filter=${2:-}

missing=""
command -v php >/dev/null || missing="php-cli"
command -v phpunit >/dev/null || missing="$missing phpunit"
if command -v php >/dev/null; then
  modules=$(php -m)
  for m in zmq msgpack pcntl posix; do
    grep -qx "$m" <<<"$modules" || missing="$missing php-$m"
  done
fi
if [ -n "$missing" ]; then
  echo "php unit: missing:$missing (deploy/install-deps.sh installs them)" >&2
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi

cd "$src/clients/php"
args=(--configuration phpunit.xml.dist --testsuite unit --do-not-cache-result)
[ -z "$filter" ] || args+=(--filter "$filter")
exec phpunit "${args[@]}"
