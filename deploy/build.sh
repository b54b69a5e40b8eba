#!/usr/bin/env bash
# Configure and build onceq into BUILD_DIR (default: build/ at the top).
# Extra arguments go to cmake's configure step, e.g. -DONCEQ_SANITIZE=ON.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$build" --parallel "$(nproc)"
