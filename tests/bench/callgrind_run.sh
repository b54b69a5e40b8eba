#!/usr/bin/env bash
# callgrind_run.sh: the worker's CPU per job in the noop cycle, as counted
# instructions, which a shared and noisy machine does not move the way it
# moves times. It starts one onceq-broker (--no-journal) and one
# onceq-worker under valgrind's callgrind (prefetch and batch from
# ONCEQ_PREFETCH and ONCEQ_BATCH, as any worker reads them), runs one
# onceq-bench warm-up, zeroes the worker's counters, runs JOBS noop jobs,
# and dumps them: every thread of the worker process (main, keeper,
# libzmq's I/O thread), from the zeroing to the dump. PHASE=cycle (the
# default) pipelines them, WINDOW in flight, so that the broker sends the
# worker several jobs to a message; PHASE=latency sends one at a time,
# each waited for, so that every job comes alone in a "job" message.
# Jobs are the broker's own count (done in stats, before and after).
#
#   tests/bench/callgrind_run.sh [BUILD_DIR]   (or BUILD=...; default ./build)
#
# Environment: JOBS (5000), PHASE (cycle), WINDOW (64), PASS_DEADLINE_S (300), INSECURE
# (1, the default here: plaintext, so that CURVE's share, the same for
# every build, does not dilute the worker's own; 0: CURVE), TOP (15
# functions listed), KEEP (set: keep the temp dir with the dump).
# Prints instructions per job in all and by library (the worker's own
# code, msgpack, libc's malloc and free, the rest of libc, libzmq; the
# kernel's side is not counted), and the hottest functions.
# Needs valgrind (Debian: valgrind).
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
JOBS=${JOBS:-5000}
PHASE=${PHASE:-cycle}
WINDOW=${WINDOW:-64}
PASS_DEADLINE_S=${PASS_DEADLINE_S:-300}
TOP=${TOP:-15}
export INSECURE=${INSECURE:-1}
BENCH_QUEUE=bench          # onceq-bench's default queue
CONNECT_DEADLINE_S=120     # the worker under callgrind starts some 50 times slower
DUMP_SETTLE_TRIES=100      # x 0.1 s: how long the dump gets to be written

SCRIPT=callgrind_run.sh
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

need_binaries "$BROKER_BIN" "$WORKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH"
command -v valgrind >/dev/null || die "valgrind not found (Debian: apt-get install valgrind)"
command -v callgrind_control >/dev/null || die "callgrind_control not found (it comes with valgrind)"
for n in "$JOBS" "$WINDOW" "$PASS_DEADLINE_S" "$TOP"; do
    [[ $n =~ ^[0-9]+$ ]] || die "not a number: '$n'"
done
[[ $PHASE == cycle || $PHASE == latency ]] || die "unknown PHASE '$PHASE' (cycle, latency)"

WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/onceq-callgrind.XXXXXX")
BROKER_PID=""
WORKER_PID=""
BEANSTALKD_PID=""
OK=0
install_cleanup
[[ -n ${KEEP:-} ]] && trap 'OK=0; echo "$SCRIPT: temp dir kept: $WORKDIR" >&2; cleanup' EXIT
setup_keys "$CLI_BIN"

done_count() {
    "$CLI_BIN" --broker "$FRONT" stats | awk -v q="$BENCH_QUEUE" '
        $1 == "QUEUE" { for (i = 1; i <= NF; i++) if ($i == "DONE") col = i }
        col && $1 == q { print $col; found = 1; exit }
        END { if (!found) print 0 }'
}

bench() { # bench PHASE JOBS DEADLINE_S
    local args=(--broker "$FRONT" --workers 1 --deadline "$3")
    if [[ $1 == cycle ]]; then
        args+=(--window "$WINDOW" --jobs "$2" --latency-jobs 0)
    else
        args+=(--jobs 1 --warmup 0 --latency-jobs "$2" --gap-us 0)
    fi
    timeout $(($3 + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" "${args[@]}" 2>&1 | tail -n 1
}

start_broker_with --no-journal --log-level warn "${BROKER_AUTH[@]}"
# One worker process, no supervisor: the PID valgrind runs as is the one that runs jobs.
(cd "$WORKDIR" && exec setsid valgrind --tool=callgrind --callgrind-out-file="$WORKDIR/callgrind.out" \
    "$WORKER_BIN" --broker "$BACK" --log-level warn) >>"$WORKDIR/worker.log" 2>&1 &
WORKER_PID=$!
echo "$SCRIPT: worker from $BUILD under callgrind; ${BROKER_AUTH[0]};" \
    "prefetch ${ONCEQ_PREFETCH:-auto (default)}, batch ${ONCEQ_BATCH:-1}" >&2
echo "  warm-up: $(bench cycle 200 "$CONNECT_DEADLINE_S")" >&2
callgrind_control -z "$WORKER_PID" >/dev/null
before=$(done_count)
echo "  measured ($PHASE): $(bench "$PHASE" "$JOBS" "$PASS_DEADLINE_S")" >&2
after=$(done_count)
callgrind_control -d "$WORKER_PID" >/dev/null
jobs=$((after - before))
((jobs > 0)) || die "no job was done"
dump=""
for ((i = 0; i < DUMP_SETTLE_TRIES; i++)); do
    for file in "$WORKDIR"/callgrind.out.*; do
        [[ -f $file ]] && dump=$file
    done
    [[ -n $dump ]] && grep -q '^totals:\|^summary:' "$dump" && break
    sleep 0.1
done
[[ -n $dump ]] || die "callgrind wrote no dump"

# Self cost by object file and function, read from the dump itself
# (callgrind's format: ob= and fn= name the object and function of the
# cost lines that follow, "(id) name" defining a name and "(id)" reusing
# it, cob=/cfn= too; the line after calls= is a call's inclusive cost and
# is skipped). callgrind_annotate is not used: it shows the functions
# that were on the stack when the counters were zeroed with their
# inclusive cost as their own.
awk -v jobs="$jobs" -v top="$TOP" '
    function named(line, kind,   id, name) {
        sub("^" kind "=", "", line)
        if (line ~ /^\([0-9]+\)/) {
            id = line; sub(/\).*/, "", id); sub(/^\(/, "", id)
            name = line; sub(/^\([0-9]+\) ?/, "", name)
            if (name != "") names[kind == "ob" || kind == "cob" ? "ob" : "fn", id] = name
            return names[kind == "ob" || kind == "cob" ? "ob" : "fn", id]
        }
        return line
    }
    /^ob=/ { ob = named($0, "ob"); next }
    /^cob=/ { named($0, "cob"); next }
    /^fn=/ { fn = named($0, "fn"); next }
    /^cfn=/ { named($0, "cfn"); next }
    /^calls=/ { skip = 1; next }
    /^[0-9+*-]/ {
        if (skip) { skip = 0; next }
        self_ob[ob] += $2; self_fn[fn " [" ob "]"] += $2; total += $2
        next
    }
    END {
        printf "  %d jobs: %.0f instructions per job\n", jobs, total / jobs
        for (o in self_ob) {
            cat = "other"
            if (o ~ /libmsgpack/) cat = "msgpack"
            else if (o ~ /libc[.-]/) cat = "libc (malloc/free: see the functions)"
            else if (o ~ /libzmq/) cat = "libzmq"
            else if (o ~ /libsodium/) cat = "libsodium (CURVE)"
            else if (o ~ /onceq/) cat = "onceq (our code)"
            by_cat[cat] += self_ob[o]
        }
        for (f in self_fn)
            if (f ~ /libc[.-]/ && f ~ /^(_int_|)(malloc|free|calloc|realloc|tcache|arena|unlink_chunk|malloc_consolidate|cfree)/)
                alloc += self_fn[f]
        by_cat["libc (malloc/free: see the functions)"] -= alloc
        by_cat["libc: malloc/free"] = alloc
        for (c in by_cat) {
            name = c; sub(/ \(malloc\/free: see the functions\)/, ": other", name)
            printf "    %8.0f  %5.1f%%  %s\n", by_cat[c] / jobs, 100 * by_cat[c] / total, name | "sort -rn"
        }
        close("sort -rn")
        print "  hottest functions (self, per job):"
        for (f in self_fn) printf "    %8.0f  %s\n", self_fn[f] / jobs, f | "sort -rn | head -n " top
        close("sort -rn | head -n " top)
    }' "$dump"
OK=1
