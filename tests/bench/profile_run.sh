#!/usr/bin/env bash
# Where a noop job's time goes: runs onceq-bench against one onceq-broker and
# one onceq-worker (prefetch from ONCEQ_PREFETCH, as any worker reads it) and
# profiles both processes, every thread, in three passes of each phase:
#
#   1. perf record -g: CPU samples grouped by where they fall (kernel
#      scheduling and switching, kernel networking, other kernel, libzmq,
#      libsodium, msgpack, libc malloc, other libc, onceq's own code), by
#      thread, and the hottest symbols;
#   2. perf stat: context switches and CPU migrations per job;
#   3. strace -c -f: system calls per job, by name;
#   4. perf record of every poll and getpid system call with its call stack
#      (DWARF): which thread and which libzmq call, from which of our
#      functions, makes them.
#
# Each pass is a fresh onceq-bench run on the same broker and worker, so
# strace's slowdown never touches the perf figures. Two phases: "cycle"
# (JOBS jobs pipelined with WINDOW in flight, as run.sh's jobs/s) and
# "latency" (LATENCY_JOBS jobs one at a time, each followed by stats polls
# until it is done, as run.sh's p50). Jobs per pass are the broker's own
# count (done in stats, before and after). See README.md here.
#
#   tests/bench/profile_run.sh [BUILD_DIR]      (or BUILD=...; default ./build)
#
# Environment: JOBS (20000), LATENCY_JOBS (1000), WINDOW (64), PHASES
# ("cycle latency"), SLOW_JOBS (1000: the jobs of passes 3 and 4 at most,
# which slow the processes down tenfold or more), TOP (12 rows per table),
# PASS_DEADLINE_S (120, one onceq-bench run at most), INSECURE (1:
# plaintext; by default CURVE, as in production), ONCEQ_PREFETCH /
# ONCEQ_BATCH (the worker's), KEEP (set: keep the temp dir with perf.data
# files and logs).
# Needs perf and strace (Debian: linux-perf, strace) and the right to trace
# (root, or kernel.perf_event_paranoid <= 1 and ptrace allowed). Without
# perf record it falls back to perf stat alone; without strace it skips pass 3.
set -euo pipefail

BUILD=${1:-${BUILD:-./build}}
JOBS=${JOBS:-20000}
LATENCY_JOBS=${LATENCY_JOBS:-1000}
WINDOW=${WINDOW:-64}
PHASES=${PHASES:-"cycle latency"}
TOP=${TOP:-12}
PASS_DEADLINE_S=${PASS_DEADLINE_S:-120}
SLOW_JOBS=${SLOW_JOBS:-1000}

TRACER_SETTLE_S=0.5     # perf and strace get this long to attach before a pass
CALLER_STACK_BYTES=8192 # user stack copied per poll/getpid for DWARF unwinding
CALLER_BUFFER_PAGES=4096 # perf's ring buffer for them (16 MiB), so none is lost
BENCH_QUEUE=bench       # onceq-bench's default queue

SCRIPT=profile_run.sh
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

need_binaries "$BROKER_BIN" "$WORKER_BIN" "$CLI_BIN" "$ONCEQ_BENCH"
need_numbers "$JOBS" "$LATENCY_JOBS" "$WINDOW" "$TOP" "$PASS_DEADLINE_S" "$SLOW_JOBS"
for phase in $PHASES; do
    [[ $phase == cycle || $phase == latency ]] || die "unknown phase '$phase' (cycle, latency)"
done
command -v perf >/dev/null || die "perf not found (Debian: apt-get install linux-perf)"
WITH_STRACE=1
command -v strace >/dev/null || { echo "$SCRIPT: no strace: skipping the syscall counts" >&2; WITH_STRACE=0; }

new_workdir profile
TRACER_PIDS=()
# The tracers first (they hold the servers), then lib.sh's cleanup.
profile_cleanup() {
    local pid
    for pid in ${TRACER_PIDS[@]+"${TRACER_PIDS[@]}"}; do
        kill -INT "$pid" 2>/dev/null || true
        wait_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ -n ${KEEP:-} ]]; then
        OK=0 # keep the temp dir
        echo "$SCRIPT: temp dir kept: $WORKDIR" >&2
    fi
    cleanup
}
trap profile_cleanup EXIT
setup_keys "$CLI_BIN"

# perf record may be refused where perf stat is not (perf_event_paranoid,
# containers): try it once on a short command.
WITH_RECORD=1
if ! perf record -q -g -o "$WORKDIR/probe.data" -- true >/dev/null 2>&1; then
    echo "$SCRIPT: perf record is not permitted here: perf stat only" >&2
    WITH_RECORD=0
fi
rm -f "$WORKDIR/probe.data"

# One worker process, no supervisor: its PID is the process that runs jobs.
start_worker() {
    (cd "$WORKDIR" && exec setsid "$WORKER_BIN" --broker "$BACK" --log-level warn) \
        >>"$WORKDIR/worker.log" 2>&1 &
    WORKER_PID=$!
}

# done_count: the bench queue's done counter, from the broker's stats.
done_count() {
    "$CLI_BIN" --broker "$FRONT" stats | awk -v q="$BENCH_QUEUE" '
        $1 == "QUEUE" { for (i = 1; i <= NF; i++) if ($i == "DONE") col = i }
        col && $1 == q { print $col; found = 1; exit }
        END { if (!found) print 0 }'
}

min() { echo $(($1 < $2 ? $1 : $2)); }

# bench PHASE [JOBS]: one onceq-bench run of that phase (JOBS, default the
# phase's own count); prints its result line.
bench() {
    local args=(--broker "$FRONT" --workers 1 --window "$WINDOW" --deadline "$PASS_DEADLINE_S")
    if [[ $1 == cycle ]]; then
        args+=(--jobs "${2:-$JOBS}" --latency-jobs 0)
    else
        args+=(--jobs 1 --warmup 0 --latency-jobs "${2:-$LATENCY_JOBS}" --latency-mode poll)
    fi
    timeout $((PASS_DEADLINE_S + EXTRA_TIMEOUT_S)) "$ONCEQ_BENCH" "${args[@]}" || die "onceq-bench failed ($1)"
}

# Stop the tracers of a pass (SIGINT makes perf and strace write their
# results) and wait for them.
stop_tracers() {
    local pid
    for pid in "${TRACER_PIDS[@]}"; do
        kill -INT "$pid" 2>/dev/null || true
    done
    for pid in "${TRACER_PIDS[@]}"; do
        if ! wait_gone "$pid"; then
            echo "$SCRIPT: tracer $pid did not stop, killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    TRACER_PIDS=()
}

# pass PHASE TOOL [JOBS]: run the phase with TOOL (record, stat, strace,
# callers) attached to the broker and the worker; sets PASS_JOBS to the jobs
# the broker completed.
pass() {
    local phase=$1 tool=$2 jobs=${3:-} name pid before after
    for name in broker worker; do
        [[ $name == broker ]] && pid=$BROKER_PID || pid=$WORKER_PID
        local out=$WORKDIR/$phase-$tool-$name
        case $tool in
        record) perf record -q -g -p "$pid" -o "$out.data" >"$out.log" 2>&1 & ;;
        stat) perf stat -x, -e context-switches,cpu-migrations,task-clock -p "$pid" \
            -o "$out.txt" >"$out.log" 2>&1 & ;;
        strace) strace -c -f -p "$pid" -o "$out.txt" >"$out.log" 2>&1 & ;;
        callers) perf record -q --call-graph "dwarf,$CALLER_STACK_BYTES" -m "$CALLER_BUFFER_PAGES" \
            -e syscalls:sys_enter_poll -e syscalls:sys_enter_getpid -p "$pid" \
            -o "$out.data" >"$out.log" 2>&1 & ;;
        esac
        TRACER_PIDS+=($!)
    done
    sleep "$TRACER_SETTLE_S"
    before=$(done_count)
    echo "  $phase, $tool: $(bench "$phase" $jobs 2>&1 | tail -n 1)" >&2
    after=$(done_count)
    stop_tracers
    PASS_JOBS=$((after - before))
    ((PASS_JOBS > 0)) || die "no job was done in the $phase pass with $tool"
}

# The perf samples of one process, grouped. Each sample is charged to its
# innermost frame: in user space by the library it is in; in the kernel by
# the first frame, walking outwards, that belongs to the scheduler (switches,
# wake-ups, sleeping in poll/epoll) or to networking (TCP/IP, loopback,
# Unix sockets), else to "kernel: other" (syscall entry and exit, files,
# memory).
classify() { # classify PERF_DATA JOBS
    perf script -i "$1" -F comm,tid,ip,sym,dso 2>/dev/null | awk -v jobs="$2" -v top="$TOP" '
        function category(   i, s) {
            if (dso[1] !~ /kernel/) {
                s = sym[1]
                if (dso[1] ~ /libzmq/) return "libzmq"
                if (dso[1] ~ /libsodium/) return "libsodium (CURVE)"
                if (dso[1] ~ /libmsgpack/) return "msgpack"
                if (dso[1] ~ /libc[.-]/ && s ~ /malloc|free|calloc|realloc|_int_|tcache|arena|memalign/)
                    return "libc: malloc/free"
                if (dso[1] ~ /libc[.-]/) return "libc: other"
                if (dso[1] ~ /onceq|libonceq/) return "onceq (our code)"
                if (dso[1] ~ /libczmq/) return "czmq"
                return "other user space"
            }
            for (i = 1; i <= n && dso[i] ~ /kernel/; i++) {
                s = sym[i]
                if (s ~ /^(__)?schedule|finish_task_switch|__switch_to|context_switch|try_to_wake_up|ttwu|wake_up|enqueue_task|dequeue_task|pick_next|update_curr|update_load_avg|select_task_rq|psi_|hrtimeout|sched_|futex_wait|futex_wake|__x64_sys_futex/)
                    return "kernel: scheduling, switches, wake-ups"
                if (s ~ /^(tcp_|__tcp|ip_|__ip|ipv4|inet_|__inet|sock_|__sock|sk_|__sk|skb_|__skb|kfree_skb|__kfree_skb|consume_skb|dev_|__dev|netif_|__netif|net_rx|__napi|napi_|loopback|unix_|__sys_send|__sys_recv|___sys_send|___sys_recv|lock_sock|release_sock)/)
                    return "kernel: networking (TCP/IP, loopback, Unix sockets)"
            }
            return "kernel: other (syscall entry/exit, poll setup, memory)"
        }
        function flush(   c) {
            if (!n) return
            c = category()
            by_cat[c]++
            by_thread[comm]++
            # Stripped symbols (most of libzmq) show as the library they are in.
            lib = dso[1]; sub(/.*\//, "", lib)
            by_sym[(dso[1] ~ /kernel/ ? "[k] " : "") (sym[1] == "[unknown]" ? "[unknown] in " lib : sym[1])]++
            total++
            n = 0
        }
        /^[^\t ]/ { flush(); comm = $0; sub(/[ \t]+[0-9]+[ \t]*$/, "", comm); next }
        /^[ \t]*$/ { flush(); next }
        {
            line = $0
            d = line; sub(/.*\(/, "", d); sub(/\)[ \t]*$/, "", d)
            s = line; sub(/^[ \t]*[0-9a-f]+ /, "", s); sub(/ \([^()]*\)[ \t]*$/, "", s); sub(/\+0x[0-9a-f]+$/, "", s)
            n++; sym[n] = s; dso[n] = d
        }
        END {
            flush()
            if (!total) { print "    no samples"; exit }
            printf "    %d samples (%.1f per job)\n", total, total / jobs
            for (c in by_cat) printf "    %5.1f%%  %s\n", 100 * by_cat[c] / total, c | "sort -rn"
            close("sort -rn")
            print "    by thread:"
            for (t in by_thread) printf "    %5.1f%%  %s\n", 100 * by_thread[t] / total, t | "sort -rn"
            close("sort -rn")
            printf "    hottest symbols (self):\n"
            for (s in by_sym) printf "    %5.1f%%  %s\n", 100 * by_sym[s] / total, s | "sort -rn | head -n " top
            close("sort -rn | head -n " top)
        }'
}

# The poll and getpid calls of one process, by who makes them: the thread,
# the outermost libzmq call on the stack (zmq_poll, zmq_msg_recv, ...; "-"
# for libzmq's own I/O thread) and the innermost of our functions that
# called it. As shares of the calls recorded: at a high rate perf drops some
# (each carries a copy of the stack), so strace's counts are the per-job
# figures.
callers() { # callers PERF_DATA
    perf script -i "$1" -F comm,event,ip,sym,dso 2>/dev/null | awk -v top="$TOP" '
        function flush() {
            if (n) { count[comm " " ev ": " api " from " ours]++; total[ev]++; all++ }
            n = 0; api = "-"; ours = "-"
        }
        /^[^\t ]/ { flush(); comm = $1; ev = $2; sub(/^syscalls:sys_enter_/, "", ev); sub(/:$/, "", ev); next }
        /^[ \t]*$/ { next }
        {
            n++
            if ($2 ~ /^zmq_/) api = $2
            if (ours == "-" && $NF ~ /onceq/) ours = $2
        }
        END {
            flush()
            if (!all) { print "    no calls recorded"; exit }
            printf "    %d calls recorded:", all
            for (e in total) printf " %s %.0f%%", e, 100 * total[e] / all
            printf "\n"
            for (k in count) printf "    %5.1f%%  %s\n", 100 * count[k] / all, k | "sort -rn | head -n " top
            close("sort -rn | head -n " top)
        }'
}

# perf stat's CSV: value,unit,event,... per line.
stat_per_job() { # stat_per_job FILE JOBS
    awk -F, -v jobs="$2" '
        $3 ~ /context-switches/ { cs = $1 }
        $3 ~ /cpu-migrations/ { mig = $1 }
        $3 ~ /task-clock/ { ms = $1 }
        END { printf "    context switches %.1f, cpu migrations %.2f, CPU %.1f us per job\n",
                     cs / jobs, mig / jobs, ms * 1000 / jobs }' "$1"
}

# strace -c's table (calls is the 4th column; errors may be empty): calls
# per job for each syscall, the most frequent first.
strace_per_job() { # strace_per_job FILE JOBS
    awk -v jobs="$2" '/^-/ || /^% time/ || $NF == "total" || NF < 5 { next }
        { all += $4; if ($4 / jobs >= 0.05) printf "%s %.1f\n", $NF, $4 / jobs }
        END { printf "~total %.1f\n", all / jobs }' "$1" | sort -k2 -rn | awk '
        $1 == "~total" { total = $2; next }
        { list = list (list ? ", " : "") $1 " " $2 }
        END { printf "    %s syscalls per job: %s\n", total, list }'
}

echo "$SCRIPT: broker and worker from $BUILD; ${BROKER_AUTH[0]}; prefetch" \
    "${ONCEQ_PREFETCH:-auto (default)}; phases: $PHASES" >&2
start_broker_with --no-journal --log-level warn "${BROKER_AUTH[@]}"
start_worker
# Wait for the worker to be connected (onceq-bench --workers 1 does too).
bench cycle >/dev/null 2>&1 || die "warm-up run failed (see $WORKDIR/*.log)"

declare -A REPORT
for phase in $PHASES; do
    section=""
    if ((WITH_RECORD)); then
        pass "$phase" record
        for name in broker worker; do
            section+="  $name: where the CPU samples fall (perf record -g, every thread)"$'\n'
            section+="$(classify "$WORKDIR/$phase-record-$name.data" "$PASS_JOBS")"$'\n'
        done
    fi
    pass "$phase" stat
    for name in broker worker; do
        section+="  $name, per job (perf stat, $PASS_JOBS jobs):"$'\n'
        section+="$(stat_per_job "$WORKDIR/$phase-stat-$name.txt" "$PASS_JOBS")"$'\n'
    done
    if [[ $phase == cycle ]]; then slow=$(min "$JOBS" "$SLOW_JOBS"); else slow=$(min "$LATENCY_JOBS" "$SLOW_JOBS"); fi
    if ((WITH_STRACE)); then
        pass "$phase" strace "$slow"
        for name in broker worker; do
            section+="  $name, per job (strace -c -f, $PASS_JOBS jobs):"$'\n'
            section+="$(strace_per_job "$WORKDIR/$phase-strace-$name.txt" "$PASS_JOBS")"$'\n'
        done
    fi
    if ((WITH_RECORD)); then
        pass "$phase" callers "$slow"
        for name in broker worker; do
            section+="  $name: who makes the poll and getpid calls (perf record, $PASS_JOBS jobs):"$'\n'
            section+="$(callers "$WORKDIR/$phase-callers-$name.data")"$'\n'
        done
    fi
    REPORT[$phase]=$section
done

echo
for phase in $PHASES; do
    if [[ $phase == cycle ]]; then
        echo "== cycle: $JOBS noop jobs pipelined (window $WINDOW), 1 worker"
    else
        echo "== latency: $LATENCY_JOBS noop jobs one at a time, stats polled until each is done, 1 worker"
    fi
    echo "${REPORT[$phase]}"
done
echo "auth: ${BROKER_AUTH[0]}; worker prefetch: ${ONCEQ_PREFETCH:-1}; $(nproc) CPUs;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
OK=1
