#!/usr/bin/env bash
# Install what onceq needs to build, test and run its demo, from Debian 12
# packages only. Idempotent: packages already present are left alone, and the
# package lists are fetched only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libzmq3-dev libczmq-dev libmsgpack-dev libjansson-dev libcmocka-dev
  libpq-dev postgresql-15 postgresql-client-15
  libmicrohttpd-dev
  # the request_shipment handler's HTTP client (worker/shipments)
  libcurl4-openssl-dev
  jq procps curl
  # tests/run.sh: the clang-format check and the libFuzzer targets
  clang clang-format libclang-rt-14-dev
  # deploy/package.sh and the package tests: cpack -G DEB (dpkg-shlibdeps,
  # file), the man pages, the maintainer scripts, systemd-analyze verify
  dpkg-dev file help2man adduser systemd
  # clients/php (the PHP client and worker) and its php.client test
  php-cli php-zmq php-msgpack php-pgsql phpunit
  # clients/laravel (the Laravel queue driver) and its php.laravel test:
  # Debian's Laravel 8 (php-illuminate-*); its app's database is PostgreSQL
  # (php-pgsql, above)
  php-laravel-framework
  # onceq-web: password hashes (crypt, in libc6-dev) and libsodium; its
  # browser test web.browser: headless chromium driven from node (below)
  libsodium-dev chromium
  # integration.test_metrics: promtool checks the broker's /metrics text
  prometheus
)
# web.browser drives chromium from node with puppeteer-core from npm (the
# test installs it into the build tree). Debian's nodejs and npm, unless a
# node with its npm is there already (another build of node ships its own
# npm, and Debian's npm package would conflict with it).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
# The benchmark's peers; only needed by tests/bench/run.sh (which skips the
# Redis peer, saying so, without them): beanstalkd, and redis-server with
# hiredis for redis-bench (built when libhiredis-dev is found).
if [ "${ONCEQ_WITH_BENCH:-0}" = 1 ]; then
  packages+=(beanstalkd redis-server libhiredis-dev)
  # clients/laravel/tests/bench.sh: Laravel's Redis driver through phpredis
  packages+=(php-redis)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
