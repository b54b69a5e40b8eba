#!/usr/bin/env bash
# End-to-end grant jobs per second against the project-local PostgreSQL
# cluster, next to the ceiling: pgbench running the same transaction with the
# same number of connections, in the same run, and the ratio.
#
#   tests/bench/pg_run.sh [BUILD_DIR]
#
# JOBS (per run, default 5000), REPEATS (default 3, the median is reported),
# WORKER_COUNTS (default "1 2 4 8"), CUSTOMERS (default 1000). Everything
# speaks CURVE with keys made here (INSECURE=1: plaintext).
#
# Batched effects, in the same run: grant-batch-bench calls grant_points'
# batch function directly (no broker), BATCH jobs per transaction (default
# 32), with one connection per worker, and its jobs/s is set beside the same
# pgbench tps. When onceq-worker has --batch (the runtime's prefetch), the
# grant jobs also run end to end with ONCEQ_PREFETCH=PREFETCH (default
# BATCH) and ONCEQ_BATCH=BATCH. E2E=0 skips both end-to-end onceq runs.
# Those two columns run BATCH_JOBS jobs each (default 50000): batched, 5,000
# jobs took some 0.3 s at 8 workers, so one hiccup of the shared machine
# moved the figure by half; 50,000 last some 2 to 3 s there (and longer at
# fewer workers).
#
# The effects SDK sends a transaction's BEGIN together with its first
# statement in one libpq pipeline (three round trips for a grant, not four).
# So that the comparison stays fair, pgbench also runs that shape, its
# \startpipeline ... \endpipeline around BEGIN and the INSERT, as a second
# column ("pgbench pipe"); "pgbench tps" is the plain four round trips.
#
# CPU=1 adds, under each row, the CPU time per job of the PostgreSQL server,
# the worker processes and the broker for the onceq column, and of the server
# and pgbench itself for the plain pgbench column (process trees' utime +
# stime from /proc, the children they reaped included; medians).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-${BUILD:-$top/build}}" && pwd)
bin=$build/bin
jobs=${JOBS:-5000}
batch_jobs=${BATCH_JOBS:-50000}
repeats=${REPEATS:-3}
worker_counts=${WORKER_COUNTS:-1 2 4 8}
customers=${CUSTOMERS:-1000}
batch=${BATCH:-32}
prefetch=${PREFETCH:-$batch}
e2e=${E2E:-1}
cpu=${CPU:-0}
hz=$(getconf CLK_TCK)
batched_e2e=0
# The help as a whole first: grep -q would end the pipe early, and with
# pipefail the worker's SIGPIPE would read as "no --batch".
worker_help=$("$bin/onceq-worker" --help 2>&1 || true)
if [ "$e2e" = 1 ] && grep -q -- '--batch' <<<"$worker_help"; then
  batched_e2e=1
fi
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

run=$(mktemp -d /tmp/onceq-pgbench-XXXXXX)
chmod 755 "$run"
pids=()
wpid=""
cleanup() {
  for p in ${wpid:+"$wpid"} ${pids[@]+"${pids[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash "$top/deploy/pg.sh" stop "$run/pg" >/dev/null 2>&1 || true
  rm -rf "$run"
}
# On Ctrl-C or SIGTERM too: exit, which runs the EXIT trap.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export ONCEQ_PG_PORT=$((40000 + RANDOM % 20000))
ONCEQ_BIN=$bin/onceq bash "$top/deploy/pg.sh" start "$run/pg" >/dev/null
export ONCEQ_DATABASE_URL=$(bash "$top/deploy/pg.sh" url "$run/pg")
psql "$ONCEQ_DATABASE_URL" -qAtX -c "INSERT INTO point_balances (customer_id, balance)
  SELECT g, 0 FROM generate_series(1, $customers) g ON CONFLICT DO NOTHING"

cat >"$run/grant.sql" <<'SQL'
\set order random(1, 9000000000000000000)
\set customer random(1, :customers)
BEGIN;
INSERT INTO point_grants (order_id, reason, customer_id, points)
  VALUES (:order, 'order_points', :customer, 1) ON CONFLICT (order_id, reason) DO NOTHING;
UPDATE point_balances SET balance = balance + 1 WHERE customer_id = :customer;
COMMIT;
SQL
# The same transaction in the effects SDK's round trips: BEGIN goes with the
# INSERT, and the UPDATE waits for the INSERT's answer.
cat >"$run/grant-pipe.sql" <<'SQL'
\set order random(1, 9000000000000000000)
\set customer random(1, :customers)
\startpipeline
BEGIN;
INSERT INTO point_grants (order_id, reason, customer_id, points)
  VALUES (:order, 'order_points', :customer, 1) ON CONFLICT (order_id, reason) DO NOTHING;
\endpipeline
UPDATE point_balances SET balance = balance + 1 WHERE customer_id = :customer;
COMMIT;
SQL

auth=(--insecure)
if [ "${INSECURE:-0}" != 1 ]; then
  "$bin/onceq" keygen --dir "$run/keys" broker >/dev/null 2>&1
  "$bin/onceq" keygen --dir "$run/client-keys" bench-admin >/dev/null 2>&1
  "$bin/onceq" keygen --dir "$run/client-keys" bench-worker >/dev/null 2>&1
  mkdir -p "$run/keys/admins" "$run/keys/workers"
  mv "$run/client-keys/bench-admin.key" "$run/keys/admins/"
  mv "$run/client-keys/bench-worker.key" "$run/keys/workers/"
  export ONCEQ_KEY=$run/client-keys/bench-admin.key_secret
  export ONCEQ_WORKER_KEY=$run/client-keys/bench-worker.key_secret
  export ONCEQ_BROKER_KEY=$run/keys/broker.key
  auth=(--keys "$run/keys")
fi
# A random port may be taken: try another until the broker answers a ping.
up=0
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 20000))
  front=tcp://127.0.0.1:$port
  back=tcp://127.0.0.1:$((port + 1))
  "$bin/onceq-broker" --front "$front" --back "$back" --data-dir "$run/data" --log-level warn \
    "${auth[@]}" >>"$run/broker.log" 2>&1 &
  bpid=$!
  for i in $(seq 50); do
    kill -0 "$bpid" 2>/dev/null || break
    if "$bin/onceq" --broker "$front" --timeout-ms 200 ping >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
  done
  if [ "$up" = 1 ]; then pids+=("$bpid"); break; fi
  kill -TERM "$bpid" 2>/dev/null || true
  wait "$bpid" 2>/dev/null || true
done
if [ "$up" != 1 ]; then
  echo "pg_run.sh: onceq-broker did not come up:" >&2
  tail -5 "$run/broker.log" >&2
  exit 1
fi

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# CPU ticks of ROOT and its descendants, with the children they reaped.
ticks() {
  local total=0 p t
  for p in $(ps -e -o pid=,ppid= | awk -v r="$1" '{up[$1] = $2}
      END {for (x in up) {y = x; while (y in up && y != r && y > 1) y = up[y]; if (y == r) print x}}'); do
    t=$(awk '{sub(/.*\) /, ""); print $12 + $13 + $14 + $15}' "/proc/$p/stat" 2>/dev/null) || t=0
    total=$((total + ${t:-0}))
  done
  echo "$total"
}
per_job() { awk -v t="$1" -v hz="$hz" -v n="$2" 'BEGIN {printf "%.0f", t * 1e6 / hz / n}'; }
postmaster=$(head -1 "$run/pg/data/postmaster.pid")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "-" && b > 0) printf "%.2f", a / b; else print "-"}'; }
pgbench_tps() { # script clients; pgbench's own CPU seconds in $run/pgbench.time
  local TIMEFORMAT='%U %S'
  { time "$pgbin/pgbench" -n -M prepared -c "$2" -j "$2" -t "$((jobs / $2))" \
      -D customers="$customers" -f "$1" "$ONCEQ_DATABASE_URL" >"$run/pgbench.out" 2>/dev/null; } \
    2>"$run/pgbench.time"
  sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$run/pgbench.out"
}
printf "%-8s %14s %14s %8s %14s %8s %14s %8s %14s %8s\n" workers "onceq jobs/s" "pgbench tps" ratio \
  "pgbench pipe" ratio "batch fn j/s" ratio "onceq+batch" ratio
for w in $worker_counts; do
  onceq_rates=(); pg_rates=(); pipe_rates=(); fn_rates=(); e2e_rates=()
  o_srv=(); o_wrk=(); o_brk=(); p_srv=(); p_cli=()
  if [ "$e2e" = 1 ]; then
    "$bin/onceq-worker" --broker "$back" --processes "$w" --log-level warn >"$run/workers.log" 2>&1 &
    wpid=$!
  fi
  for r in $(seq "$repeats"); do
    if [ "$e2e" = 1 ]; then
      [ "$cpu" = 1 ] && { s0=$(ticks "$postmaster"); w0=$(ticks "$wpid"); b0=$(ticks "${pids[0]}"); }
      line=$("$bin/onceq-bench" --broker "$front" --grant "$customers" --jobs "$jobs" \
               --latency-jobs 0 --warmup 100 --workers "$w" 2>/dev/null)
      onceq_rates+=("$(sed -n 's/.*jobs_per_s=\([0-9.]*\).*/\1/p' <<<"$line")")
      if [ "$cpu" = 1 ]; then # the 100 warm-up jobs ran in this window too
        o_srv+=("$(per_job $(($(ticks "$postmaster") - s0)) $((jobs + 100)))")
        o_wrk+=("$(per_job $(($(ticks "$wpid") - w0)) $((jobs + 100)))")
        o_brk+=("$(per_job $(($(ticks "${pids[0]}") - b0)) $((jobs + 100)))")
      fi
    fi
    [ "$cpu" = 1 ] && s0=$(ticks "$postmaster")
    pg_rates+=("$(pgbench_tps "$run/grant.sql" "$w")")
    if [ "$cpu" = 1 ]; then
      p_srv+=("$(per_job $(($(ticks "$postmaster") - s0)) "$jobs")")
      p_cli+=("$(awk -v n="$jobs" '{printf "%.0f", ($1 + $2) * 1e6 / n}' "$run/pgbench.time")")
    fi
    pipe_rates+=("$(pgbench_tps "$run/grant-pipe.sql" "$w")")
    line=$("$bin/grant-batch-bench" --database "$ONCEQ_DATABASE_URL" --workers "$w" \
             --jobs "$batch_jobs" --batch "$batch" --customers "$customers")
    fn_rates+=("$(sed -n 's/.*jobs_per_s=\([0-9.]*\).*/\1/p' <<<"$line")")
  done
  if [ "$e2e" = 1 ]; then
    kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=""
  fi
  if [ "$batched_e2e" = 1 ]; then
    ONCEQ_PREFETCH=$prefetch ONCEQ_BATCH=$batch "$bin/onceq-worker" --broker "$back" \
      --processes "$w" --log-level warn >"$run/workers-batch.log" 2>&1 &
    wpid=$!
    for r in $(seq "$repeats"); do
      line=$("$bin/onceq-bench" --broker "$front" --grant "$customers" --jobs "$batch_jobs" \
               --latency-jobs 0 --warmup 100 --workers "$w" 2>/dev/null)
      e2e_rates+=("$(sed -n 's/.*jobs_per_s=\([0-9.]*\).*/\1/p' <<<"$line")")
    done
    kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=""
  fi
  p=$(printf "%s\n" "${pg_rates[@]}" | median)
  q=$(printf "%s\n" "${pipe_rates[@]}" | median)
  f=$(printf "%s\n" "${fn_rates[@]}" | median)
  o=-; e=-
  [ "$e2e" = 1 ] && o=$(printf "%s\n" "${onceq_rates[@]}" | median)
  [ "$batched_e2e" = 1 ] && e=$(printf "%s\n" "${e2e_rates[@]}" | median)
  printf "%-8s %14s %14.0f %8s %14.0f %8s %14.0f %8s %14s %8s   (runs: onceq %s; pgbench %s; pgbench pipe %s; batch fn %s; onceq+batch %s)\n" \
    "$w" "$o" "$p" "$(ratio "$o" "$p")" "$q" "$(ratio "$o" "$q")" "$f" "$(ratio "$f" "$p")" \
    "$e" "$(ratio "$e" "$p")" \
    "${onceq_rates[*]:-}" "${pg_rates[*]}" "${pipe_rates[*]}" "${fn_rates[*]}" "${e2e_rates[*]:-}"
  if [ "$cpu" = 1 ]; then
    m() { printf "%s\n" "$@" | median; }
    ps_=$(m "${p_srv[@]}"); pc=$(m "${p_cli[@]}")
    if [ "$e2e" = 1 ]; then
      os=$(m "${o_srv[@]}"); ow=$(m "${o_wrk[@]}"); ob=$(m "${o_brk[@]}")
      printf "         cpu us/job: onceq server %s + workers %s + broker %s = %s;" \
        "$os" "$ow" "$ob" $((os + ow + ob))
    fi
    printf "  pgbench server %s + pgbench %s = %s\n" "$ps_" "$pc" $((ps_ + pc))
  fi
done
echo "ratio = each column / pgbench, same transaction (INSERT ... ON CONFLICT DO NOTHING, UPDATE balance, COMMIT),"
echo "same connection count, $jobs transactions (jobs) per run, median of $repeats runs"
echo "pgbench pipe: the same transaction with BEGIN and the INSERT in one pipeline (\\startpipeline), as the"
echo "  effects SDK sends it (three round trips); its ratio is onceq jobs/s over it"
echo "batch fn: grant_points' batch function called directly, $batch jobs per transaction (grant-batch-bench),"
echo "  $batch_jobs jobs per run (BATCH_JOBS), as onceq+batch"
if [ "$batched_e2e" = 1 ]; then
  echo "onceq+batch: end to end with ONCEQ_PREFETCH=$prefetch ONCEQ_BATCH=$batch, $batch_jobs jobs per run"
elif [ "$e2e" = 1 ]; then
  echo "onceq+batch: -, this onceq-worker has no --batch"
fi
