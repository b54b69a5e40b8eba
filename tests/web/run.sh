#!/usr/bin/env bash
# web.browser: onceq-web in a real browser. Debian's chromium, headless,
# driven over the DevTools protocol by puppeteer-core from npm (installed
# into the build tree, never the source tree), against the real broker,
# onceq-test-worker processes and the onceq tool. Screenshots of each page
# land in BUILD/web-screenshots. Skips (77) without chromium, node or npm,
# unless CI=true: then it fails.
#   run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
chromium=$(command -v chromium || true)
if [ -z "$chromium" ] || ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "web.browser: chromium, node and npm are needed (deploy/install-deps.sh)" >&2
    exit 1
  fi
  echo "web.browser: skipped: chromium, node or npm missing (deploy/install-deps.sh)"
  exit 77
fi
deps="$build/web-test-deps"
if [ ! -d "$deps/node_modules/puppeteer-core" ]; then
  mkdir -p "$deps"
  cp "$src/tests/web/package.json" "$deps/package.json"
  (cd "$deps" && npm install --no-audit --no-fund --silent) || {
    echo "web.browser: npm install puppeteer-core failed" >&2
    exit 1
  }
fi
export NODE_PATH="$deps/node_modules"
export ONCEQ_BIN="$build/bin"
export CHROMIUM="$chromium"
export SCREENSHOTS="$build/web-screenshots"
exec node "$src/tests/web/browser.test.js"
