#!/usr/bin/env bash
# The onceq demo: installs what is needed, builds, then runs a broker and a
# pool of workers, dispatches a burst of jobs, kills workers with SIGKILL in
# the middle of their jobs, and checks from the broker's counters that every
# job completed exactly once. Exits non-zero if anything differs.
#
#   JOBS=300 WORKERS=4 KILLS=2 bash deploy/demo.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

jobs_total=${JOBS:-300}
workers=${WORKERS:-4}
kills=${KILLS:-2}
job_ms=${JOB_MS:-100}

bash deploy/install-deps.sh
echo "== building"
BUILD_DIR=$top/build bash deploy/build.sh >/dev/null
bin=$top/build/bin

run=$(mktemp -d /tmp/onceq-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# Pick a free pair of loopback ports: the broker refuses to start on a used one.
for try in $(seq 20); do
  port=$((20000 + RANDOM % 20000))
  export ONCEQ_BROKER=tcp://127.0.0.1:$port
  back=tcp://127.0.0.1:$((port + 1))
  "$bin/onceq-broker" --front "$ONCEQ_BROKER" --back "$back" --heartbeat-ms 250 \
    >"$run/broker.log" 2>&1 &
  broker=$!
  sleep 0.3
  if kill -0 "$broker" 2>/dev/null && "$bin/onceq" ping >/dev/null 2>&1; then break; fi
  kill "$broker" 2>/dev/null || true
  broker=""
done
[ -n "$broker" ] || { echo "demo: could not start the broker"; cat "$run/broker.log"; exit 1; }
pids+=("$broker")
echo "== broker on $ONCEQ_BROKER (workers on $back), logs in $run"

"$bin/onceq-worker" --broker "$back" --processes "$workers" >"$run/workers.log" 2>&1 &
pids+=("$!")

stats() { "$bin/onceq" stats --json; }
field() { stats | jq -r "$1"; }

for _ in $(seq 100); do
  [ "$(field '.workers | length')" -ge "$workers" ] && break
  sleep 0.1
done
echo "== $(field '.workers | length') workers connected"

echo "== dispatching $jobs_total jobs (sleep ${job_ms} ms each)"
for i in $(seq "$jobs_total"); do
  "$bin/onceq" dispatch sleep --payload "{\"ms\": $job_ms}" >/dev/null
done

killed=0
while [ "$killed" -lt "$kills" ]; do
  victim=$(field '[.workers[] | select(.leased > 0) | .pid][0] // empty')
  if [ -n "$victim" ]; then
    kill -KILL "$victim"
    killed=$((killed + 1))
    echo "== killed worker pid $victim with SIGKILL in the middle of a job"
    sleep 1
  else
    sleep 0.05
  fi
done

deadline=$((SECONDS + 120))
while :; do
  s=$(stats)
  done_count=$(jq '[.queues[] | select(.name=="default") | .done][0] // 0' <<<"$s")
  [ "$done_count" -ge "$jobs_total" ] && break
  if [ $SECONDS -gt $deadline ]; then echo "demo: jobs did not finish in time"; break; fi
  sleep 0.2
done

q=$(jq '.queues[] | select(.name=="default")' <<<"$s")
dispatched=$(jq .dispatched <<<"$q"); done_count=$(jq .done <<<"$q")
failed=$(jq .failed <<<"$q"); redelivered=$(jq .redelivered <<<"$q")
left=$(jq '.ready + .delayed + .leased' <<<"$q")
ok_lines=$(grep -c 'outcome=ok' "$run/workers.log" || true)
distinct=$(grep -o 'job [0-9]* type=sleep attempt=[0-9]* outcome=ok' "$run/workers.log" \
             | awk '{print $2}' | sort -u | wc -l)

echo
echo "                         expected   actual"
printf "  jobs dispatched        %8d %8d\n" "$jobs_total" "$dispatched"
printf "  completed (broker)     %8d %8d\n" "$jobs_total" "$done_count"
printf "  failed                 %8d %8d\n" 0 "$failed"
printf "  still queued or leased %8d %8d\n" 0 "$left"
printf "  distinct jobs run ok   %8d %8d\n" "$jobs_total" "$distinct"
printf "  workers killed                  %8d\n" "$killed"
printf "  redelivered after kill          %8d\n" "$redelivered"
printf "  ok runs reported by workers     %8d\n" "$ok_lines"
echo
if [ "$dispatched" -eq "$jobs_total" ] && [ "$done_count" -eq "$jobs_total" ] &&
   [ "$failed" -eq 0 ] && [ "$left" -eq 0 ] && [ "$distinct" -eq "$jobs_total" ]; then
  echo "PASS: every job completed exactly once from the broker's view, despite $killed killed workers"
else
  echo "FAIL: the counts above differ"
  exit 1
fi
