#!/usr/bin/env bash
# integration.hello_install: the SDK as a user gets it. Install the build into
# a temp prefix, build examples/hello against that prefix alone (the cc
# one-liner and its CMakeLists.txt, from a copy outside the checkout), and run
# it with the installed broker, onceq tool and pg.sh against a project-local
# PostgreSQL:
#
#   - every onceq header the example includes resolves under the prefix, and
#     the libraries it loads are the prefix's: a header installed without its
#     library, or one not installed, fails the build or this check;
#   - everything speaks CURVE with keys made by the installed `onceq keygen`,
#     passed as flags (the broker, the cc build) and as environment
#     variables (the CMake build, the onceq tool);
#   - both builds connect (the cc build with --processes 2);
#   - "hello" for ada, ada, grace: 3 done, 2 applied, 1 already_applied;
#   - a missing, empty, non-text and over-long name each fail with a reason
#     naming the field;
#   - one once-guard row and one greeting per name, written by the same job;
#   - a mixed fleet: the installed onceq-worker (built-in types, no hello)
#     joins the hello workers; hello and noop jobs dispatched together each
#     go only to a worker that handles their type, and none fails.
#
# Every process it starts is stopped by PID, the cluster is stopped and the
# temp dirs are removed on any exit (ONCEQ_KEEP_TEST_DIR=1 keeps them).
#
#   bash tests/integration/test_hello_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "${1:?usage: test_hello_install.sh SOURCE_DIR BUILD_DIR}" && pwd -P)
build=$(cd "${2:?usage: test_hello_install.sh SOURCE_DIR BUILD_DIR}" && pwd -P)

wait_s=60         # bound on anything the test waits for
stop_s=20         # bound on a graceful stop before SIGKILL
max_name_bytes=256 # OQ_ONCE_MAX_KEY_LEN, the name's bound in hello.c

# Nothing of the checkout, the build or the caller's setup may leak in.
unset LD_LIBRARY_PATH PKG_CONFIG_LIBDIR ONCEQ_BIN ONCEQ_BIN_DIR ONCEQ_DATABASE_URL \
  ONCEQ_PG_DIR ONCEQ_PG_SCRIPT ONCEQ_WORKER_BROKER ONCEQ_BROKER CPATH C_INCLUDE_PATH LIBRARY_PATH \
  ONCEQ_KEYS ONCEQ_KEY ONCEQ_WORKER_KEY ONCEQ_BROKER_KEY ONCEQ_INSECURE

work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-hello-XXXXXX")
chmod 755 "$work" # as root the cluster runs as postgres, which must reach it
prefix=$work/prefix
pids=()
pg_started=0

log() { echo "hello_install: $*" >&2; }
fail() {
  log "FAIL: $*"
  for f in "$work"/*.log; do
    [ -f "$f" ] || continue
    echo "---- ${f#$work/} (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
  exit 1
}

# A zombie still answers kill -0: read the state from /proc.
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ "$state" != Z ]
}

# Stop one process this test started: SIGTERM, up to stop_s, then SIGKILL.
# Sets stopped_status to its exit status (not in a subshell: only this
# shell can reap its children).
stopped_status=0
stop_pid() {
  local pid=$1 end=$((SECONDS + stop_s))
  kill -TERM "$pid" 2>/dev/null || true
  while alive "$pid" && [ $SECONDS -lt $end ]; do sleep 0.1; done
  if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  stopped_status=0
  wait "$pid" 2>/dev/null || stopped_status=$?
}

cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do
    if alive "$pid"; then stop_pid "$pid"; fi
  done
  if [ "$pg_started" = 1 ]; then
    ONCEQ_PG_PORT=$pg_port bash "$prefix/share/onceq/pg.sh" stop "$work/pg" >/dev/null 2>&1 ||
      log "could not stop the cluster in $work/pg"
  fi
  if [ -n "${ONCEQ_KEEP_TEST_DIR:-}" ]; then
    log "kept $work"
  else
    rm -rf "$work"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A loopback port free now (perl-base is in every Debian system).
free_port() {
  perl -MIO::Socket::INET -e \
    'my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0) or die "$!\n";
     print $s->sockport, "\n";'
}

# Poll a command until it succeeds, at most wait_s.
wait_for() {
  local what=$1 end=$((SECONDS + wait_s))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "$what: not within ${wait_s}s"
    sleep 0.1
  done
}

# ---- install ---------------------------------------------------------------

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  fail "cmake --install failed"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
onceq=$prefix/bin/onceq

flags=$(pkg-config --cflags --libs onceq-worker onceq-effects 2>"$work/pkg-config.log") ||
  fail "pkg-config onceq-worker onceq-effects: $(cat "$work/pkg-config.log")"
for tree in "$src" "$build"; do
  case "$flags" in *"$tree"*) fail "pkg-config names $tree: $flags" ;; esac
done

# ---- build the example from a copy, against the prefix alone ---------------

cp -r "$src/examples/hello" "$work/hello"
cd "$work/hello"
rm -rf build

# The one-liner of README.md (with -Werror, and an rpath so that it runs
# without LD_LIBRARY_PATH).
# shellcheck disable=SC2086 # the flags are words
cc -Wall -Wextra -Werror hello.c $flags -Wl,-rpath,"$prefix/lib" -o hello-cc \
  >"$work/cc.log" 2>&1 || fail "the cc one-liner does not build hello.c"

# Every onceq header the example reaches must come from the prefix: not
# from the checkout, the build tree, or another install on the system.
real_include=$(realpath "$prefix/include")
# shellcheck disable=SC2086
headers=$(cc -M hello.c $(pkg-config --cflags onceq-worker onceq-effects) | tr ' \\' '\n\n' |
  grep '/onceq/[^/]*\.h$' | xargs -r realpath | sort -u)
[ -n "$headers" ] || fail "cc -M lists no onceq header"
for h in $headers; do
  case "$h" in "$real_include"/onceq/*) ;; *) fail "hello.c reaches $h, outside the prefix" ;; esac
done
for h in worker.h effects.h effects_worker.h; do
  grep -qx "$real_include/onceq/$h" <<<"$headers" || fail "onceq/$h does not come from the prefix"
done

cmake -S . -B build -DCMAKE_C_FLAGS=-Werror >"$work/cmake.log" 2>&1 ||
  fail "the example's CMakeLists.txt does not configure"
cmake --build build >>"$work/cmake.log" 2>&1 || fail "the example's CMakeLists.txt does not build"
[ -x build/hello-worker ] || fail "the CMake build made no build/hello-worker"

# Both binaries load the SDK's libraries from the prefix.
real_lib=$(realpath "$prefix/lib")
for bin in hello-cc build/hello-worker; do
  for lib in libonceq-worker.so.0 libonceq-effects.so.0 libonceq.so.0; do
    path=$(ldd "$bin" | awk -v l="$lib" '$1 == l { print $3 }')
    [ -n "$path" ] && [ "$path" != "not" ] || fail "$bin: $lib not found ($(ldd "$bin" | grep onceq))"
    [ "$(realpath "$path")" = "$real_lib/$(basename "$(realpath "$path")")" ] ||
      fail "$bin loads $lib from $path, not from the prefix"
  done
done
cd "$work"

# ---- the database: the installed pg.sh and `onceq db migrate` --------------

pg_port=$(free_port)
pg_started=1
ONCEQ_PG_PORT=$pg_port bash "$prefix/share/onceq/pg.sh" start "$work/pg" >"$work/pg.log" 2>&1 ||
  fail "the installed pg.sh did not start the cluster"
url=$(ONCEQ_PG_PORT=$pg_port bash "$prefix/share/onceq/pg.sh" url "$work/pg")
sql() { psql "$url" -X -q -v ON_ERROR_STOP=1 -tA -c "$1"; }
[ "$(sql "SELECT to_regclass('onceq_once') IS NOT NULL")" = t ] ||
  fail "onceq db migrate did not create onceq_once (deploy/sql/0002_once.sql)"

# ---- keys: the broker's pair, an admin for the tool, a worker ---------------

keys=$work/keys
"$onceq" keygen --dir "$keys" broker >"$work/keygen.log" 2>&1 || fail "onceq keygen broker"
"$onceq" keygen --dir "$work/me" admin >>"$work/keygen.log" 2>&1 || fail "onceq keygen admin"
"$onceq" keygen --dir "$work/me" hello >>"$work/keygen.log" 2>&1 || fail "onceq keygen hello"
[ "$(stat -c %a "$work/me/hello.key_secret")" = 600 ] || fail "a secret key file is not 0600"
mkdir -p "$keys/admins" "$keys/workers"
cp "$work/me/admin.key" "$keys/admins/"
cp "$work/me/hello.key" "$keys/workers/"
export ONCEQ_KEY=$work/me/admin.key_secret
export ONCEQ_BROKER_KEY=$keys/broker.key

# ---- broker and workers ----------------------------------------------------

front=tcp://127.0.0.1:$(free_port)
back=tcp://127.0.0.1:$(free_port)
"$prefix/bin/onceq-broker" --front "$front" --back "$back" --data-dir "$work/data" \
  --keys "$keys" >"$work/broker.log" 2>&1 &
pids+=($!)
wait_for "the broker answering a ping" "$onceq" ping --broker "$front"

"$work/hello/hello-cc" --broker "$back" --processes 2 --name hello-cc --database "$url" \
  --key "$work/me/hello.key_secret" --broker-key "$keys/broker.key" \
  >"$work/worker-cc.log" 2>&1 &
pids+=($!)
cc_pid=$!
ONCEQ_WORKER_KEY=$work/me/hello.key_secret "$work/hello/build/hello-worker" --broker "$back" \
  --name hello-cmake --database "$url" \
  --isolation repeatable-read >"$work/worker-cmake.log" 2>&1 &
pids+=($!)
cmake_pid=$!

stats() { "$onceq" stats --json --broker "$front"; }
workers_up() {
  stats | jq -e '[.workers[].name] | (map(select(startswith("hello-cc"))) | length) == 2
                                   and (map(select(startswith("hello-cmake"))) | length) == 1'
}
wait_for "both builds connected (2 + 1 workers)" workers_up

# ---- jobs ------------------------------------------------------------------

dispatch() {
  "$onceq" dispatch hello --broker "$front" --payload "$1" >>"$work/dispatch.log" 2>&1 ||
    fail "onceq dispatch hello --payload '$1'"
}
long_name=$(printf 'x%.0s' $(seq 1 $((max_name_bytes + 1))))
dispatch '{"name": "ada"}'
dispatch '{"name": "ada"}'
dispatch '{"name": "grace"}'
dispatch '{}'
dispatch '{"name": ""}'
dispatch '{"name": 42}'
dispatch "{\"name\": \"$long_name\"}"

settled() {
  stats | jq -e '(.types[] | select(.name == "hello") | .done == 3 and .failed == 4)
                 and (.queues[] | select(.name == "default")
                      | .ready == 0 and .leased == 0 and .delayed == 0)'
}
wait_for "3 hello jobs done and 4 failed, none left" settled

final=$(stats)
hello=$(jq -c '.types[] | select(.name == "hello")' <<<"$final")
[ "$(jq '.applied' <<<"$hello")" = 2 ] || fail "expected 2 applied: $hello"
[ "$(jq '.duplicates' <<<"$hello")" = 1 ] || fail "expected 1 already_applied: $hello"

failed=$("$onceq" failed list --json --broker "$front")
for reason in '"name" is missing' '"name" is empty' '"name" must be text, not a number' \
  "is $((max_name_bytes + 1)) bytes, at most $max_name_bytes"; do
  jq -e --arg r "$reason" '[.jobs[] | select(.type == "hello" and (.error | contains($r)))]
                           | length == 1' <<<"$failed" >/dev/null ||
    fail "no failed hello job with the reason '$reason': $failed"
done

# ---- the database: once per name -------------------------------------------

[ "$(sql "SELECT string_agg(key, ',' ORDER BY key) FROM onceq_once WHERE scope = 'hello'")" = ada,grace ] ||
  fail "once-guard rows: $(sql "SELECT scope, key, job_id FROM onceq_once")"
[ "$(sql "SELECT string_agg(name || '=' || n, ',' ORDER BY name)
          FROM (SELECT name, count(*) AS n FROM hello_greetings GROUP BY name) g")" = ada=1,grace=1 ] ||
  fail "greetings: $(sql "SELECT name, job_id FROM hello_greetings")"
# The greeting and its guard row were written by the same job, together.
[ "$(sql "SELECT count(*) FROM hello_greetings g JOIN onceq_once o
          ON o.scope = 'hello' AND o.key = g.name AND o.job_id = g.job_id")" = 2 ] ||
  fail "a greeting and its guard row name different jobs"

# ---- a mixed fleet: the built-in worker beside the hello workers -----------

mixed_jobs=20
"$prefix/bin/onceq-worker" --broker "$back" --name builtin --key "$work/me/hello.key_secret" \
  >"$work/worker-builtin.log" 2>&1 &
pids+=($!)
builtin_pid=$!
builtin_up() { stats | jq -e '[.workers[].name] | map(select(startswith("builtin"))) | length == 1'; }
wait_for "the built-in worker connected beside the hello workers" builtin_up
for i in $(seq 1 $mixed_jobs); do
  dispatch "{\"name\": \"mixed-$i\"}"
  "$onceq" dispatch noop --broker "$front" >>"$work/dispatch.log" 2>&1 || fail "onceq dispatch noop"
done
mixed_settled() {
  stats | jq -e --argjson n "$mixed_jobs" \
    '(.types[] | select(.name == "hello") | .done == 3 + $n and .failed == 4)
     and (.types[] | select(.name == "noop") | .done == $n and .failed == 0)
     and (.queues[] | select(.name == "default") | .ready == 0 and .leased == 0 and .delayed == 0)'
}
wait_for "$mixed_jobs hello and $mixed_jobs noop jobs done, none failed" mixed_settled
# Each job reached only a worker that handles its type.
[ "$(grep -c 'type=noop .*outcome=ok' "$work/worker-builtin.log")" = "$mixed_jobs" ] ||
  fail "the built-in worker did not run the $mixed_jobs noop jobs"
if grep -q 'type=hello' "$work/worker-builtin.log"; then
  fail "the built-in worker was sent a hello job"
fi
if grep -q 'type=noop' "$work/worker-cc.log" "$work/worker-cmake.log"; then
  fail "a hello worker was sent a noop job"
fi
[ "$(jq '.queues[] | select(.name == "default") | .retried' <<<"$(stats)")" = 0 ] ||
  fail "a job of the mixed fleet used a try: $(stats | jq -c '.queues')"

# ---- a graceful stop -------------------------------------------------------

for pid in "$cc_pid" "$cmake_pid" "$builtin_pid"; do
  stop_pid "$pid"
  [ "$stopped_status" = 0 ] || fail "worker $pid exited with status $stopped_status after SIGTERM"
done
log "ok: built from $prefix alone; 2 applied, 1 already_applied, 4 bad payloads failed; mixed fleet ran $mixed_jobs hello and $mixed_jobs noop jobs, each on its own worker"
