# shellcheck shell=bash disable=SC2034 # its constants and binaries are used by the scripts that source it
# Helpers shared by the benchmark scripts (run.sh, curve_run.sh, durable_run.sh, batch_run.sh,
# memory_run.sh, profile_run.sh, callgrind_run.sh). Sourced, not run. The caller sets SCRIPT (its
# name, for messages) and BUILD before sourcing it, and makes its WORKDIR with
# new_workdir, which sets the *_PID variables and OK that the traps read.
# Sourcing it sets the constants below, resolves BUILD and finds the binaries;
# a script that needs another value of a constant sets it after sourcing.

# Port range for our own servers: high, unprivileged, below the usual
# ephemeral range (32768+ on Linux is avoided only in part; a taken port is
# detected and another one tried).
PORT_BASE=20000
PORT_SPAN=20000
START_ATTEMPTS=5     # ports a server is tried on before giving up
READY_TRIES=50       # x READY_SLEEP_S: how long a server gets to come up
READY_SLEEP_S=0.1
STOP_GRACE_TRIES=100 # x 0.1 s: how long a process gets to exit on SIGTERM
EXTRA_TIMEOUT_S=30   # on top of a run's own deadline for the outer `timeout`
PING_TIMEOUT_MS=200  # how long ping_ok waits for the broker's answer

die() { echo "$SCRIPT: $*" >&2; exit 1; }

# The build directory as an absolute path: a relative one ("build") would
# make the binaries' paths look like command names to setsid and exec.
# The message names the path as given: a failed substitution would leave
# BUILD empty if it were assigned directly.
BUILD_ABS=$(cd "$BUILD" 2>/dev/null && pwd) || die "no build directory: $BUILD (build first: bash deploy/build.sh)"
BUILD=$BUILD_ABS

# A binary of the build: in BUILD/bin (the tree's layout), or else next to
# the CMakeLists.txt that declares it.
# The path is absolute: the servers are started from inside WORKDIR.
binary() {
    local name=$1 subdir=$2 build
    build=$(cd "$BUILD" && pwd) || die "no build directory $BUILD"
    if [[ -x $build/bin/$name ]]; then echo "$build/bin/$name"; else echo "$build/$subdir/$name"; fi
}

BROKER_BIN=$(binary onceq-broker broker)
WORKER_BIN=$(binary onceq-worker worker)
CLI_BIN=$(binary onceq clients/cli)
ONCEQ_BENCH=$(binary onceq-bench tests/bench)
BEANSTALK_BENCH=$(binary beanstalk-bench tests/bench)
REDIS_BENCH=$(binary redis-bench tests/bench)

# need_binaries PATH...: stop unless each of the binaries a script runs is there.
need_binaries() {
    local bin
    for bin in "$@"; do
        [[ -x $bin ]] || die "missing $bin (build first: cmake --build $BUILD)"
    done
}

# Stop one process we started: SIGTERM (or the given signal), wait, SIGKILL
# if it will not go. Servers run in a session of their own (setsid), so
# whatever a worker supervisor left behind is found in its process group and
# stopped too.
wait_gone() { # wait_gone KILL-TARGET: up to STOP_GRACE_TRIES x 0.1 s
    for ((i = 0; i < STOP_GRACE_TRIES; i++)); do
        kill -0 -- "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

stop_pid() { # stop_pid PID [SIGNAL]
    local pid=$1 sig=${2:-TERM}
    [[ -n $pid ]] || return 0
    kill -"$sig" "$pid" 2>/dev/null || true
    if ! wait_gone "$pid"; then
        echo "$SCRIPT: pid $pid ignored SIG$sig, sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    if kill -0 -- "-$pid" 2>/dev/null; then
        echo "$SCRIPT: processes left in group $pid, stopping them" >&2
        kill -TERM -- "-$pid" 2>/dev/null || true
        wait_gone "-$pid" || kill -KILL -- "-$pid" 2>/dev/null || true
    fi
}

# Stop every server, and keep the logs of a failed run.
cleanup() {
    stop_pid "$WORKER_PID"
    stop_pid "$BROKER_PID"
    stop_pid "$BEANSTALKD_PID"
    stop_pid "${REDIS_PID:-}"
    if ((OK)); then
        rm -rf "$WORKDIR"
    else
        echo "$SCRIPT: failed; logs kept in $WORKDIR" >&2
        for log in "$WORKDIR"/*.log; do
            [[ -f $log ]] || continue
            echo "---- $log (last lines)" >&2
            tail -n 20 "$log" >&2
        done
    fi
}
# Call once WORKDIR and the *_PID variables exist.
install_cleanup() {
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# need_numbers VALUE...: stop unless each is a whole number, as the
# environment gave the counts and seconds a script runs with.
need_numbers() {
    local n
    for n in "$@"; do
        [[ $n =~ ^[0-9]+$ ]] || die "not a number: '$n'"
    done
}

# new_workdir NAME: a fresh WORKDIR ($TMPDIR/onceq-NAME.XXXXXX), no server
# started yet, and the traps of install_cleanup set; a script sets OK=1 when
# it has succeeded, so that the logs are removed.
new_workdir() {
    WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/onceq-$1.XXXXXX")
    BROKER_PID=""
    WORKER_PID=""
    BEANSTALKD_PID=""
    REDIS_PID=""
    OK=0
    install_cleanup
}

# rss_kb PID: its resident set in KiB (0 once it is gone).
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# per_job KIB JOBS: bytes per job, or "-" for no jobs.
per_job() { awk -v kb="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.0f", kb * 1024 / n; else print "-" }'; }

random_port() { echo $((PORT_BASE + RANDOM % PORT_SPAN)); }

# ping_ok: the broker on FRONT answers a ping within PING_TIMEOUT_MS.
ping_ok() { "$CLI_BIN" --broker "$FRONT" --timeout-ms "$PING_TIMEOUT_MS" ping >/dev/null 2>&1; }

# spawn_broker FLAGS...: onceq-broker on the current FRONT and BACK with these
# flags, in WORKDIR and a session of its own, its output appended to
# WORKDIR/broker.log; sets BROKER_PID and does not wait.
spawn_broker() {
    (cd "$WORKDIR" && exec setsid "$BROKER_BIN" --front "$FRONT" --back "$BACK" "$@") \
        >>"$WORKDIR/broker.log" 2>&1 &
    BROKER_PID=$!
}

# wait_ready PID CHECK: true once the command CHECK succeeds, polled every
# READY_SLEEP_S up to READY_TRIES times; false at once if PID has exited.
wait_ready() {
    local pid=$1 check=$2 i
    for ((i = 0; i < READY_TRIES; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        "$check" && return 0
        sleep "$READY_SLEEP_S"
    done
    return 1
}

# start_broker_with FLAGS...: spawn_broker on a random FRONT port (BACK the
# next one) and wait until it answers; on other ports if it dies or stays
# silent, START_ATTEMPTS times at most.
start_broker_with() {
    local attempt
    for ((attempt = 0; attempt < START_ATTEMPTS; attempt++)); do
        FRONT_PORT=$(random_port)
        FRONT=tcp://127.0.0.1:$FRONT_PORT
        BACK=tcp://127.0.0.1:$((FRONT_PORT + 1))
        spawn_broker "$@"
        wait_ready "$BROKER_PID" ping_ok && return 0
        stop_pid "$BROKER_PID"
        BROKER_PID=""
    done
    die "onceq-broker did not come up (see $WORKDIR/broker.log)"
}

# CURVE for everything a script starts, as in production, unless INSECURE=1:
# keys made in WORKDIR/keys (the broker's --keys) with an admin key for onceq
# and onceq-bench and a worker key, exported as ONCEQ_KEY, ONCEQ_WORKER_KEY
# and ONCEQ_BROKER_KEY, which those programs read. BROKER_AUTH gets the
# broker's flags: (--keys DIR) or (--insecure). Call once WORKDIR exists.
#   setup_keys ONCEQ_CLI [plain]
setup_keys() {
    local cli=$1 keys=$WORKDIR/keys me=$WORKDIR/client-keys
    if [[ ${2:-} == plain || ${INSECURE:-0} == 1 ]]; then
        BROKER_AUTH=(--insecure)
        unset ONCEQ_KEY ONCEQ_WORKER_KEY ONCEQ_BROKER_KEY
        return 0
    fi
    if [[ ! -f $keys/broker.key_secret ]]; then
        "$cli" keygen --dir "$keys" broker >/dev/null 2>&1 || die "onceq keygen failed"
        "$cli" keygen --dir "$me" bench-admin >/dev/null 2>&1 || die "onceq keygen failed"
        "$cli" keygen --dir "$me" bench-worker >/dev/null 2>&1 || die "onceq keygen failed"
        mkdir -p "$keys/admins" "$keys/workers"
        mv "$me/bench-admin.key" "$keys/admins/"
        mv "$me/bench-worker.key" "$keys/workers/"
    fi
    export ONCEQ_KEY=$me/bench-admin.key_secret
    export ONCEQ_WORKER_KEY=$me/bench-worker.key_secret
    export ONCEQ_BROKER_KEY=$keys/broker.key
    BROKER_AUTH=(--keys "$keys")
}

# field LINE KEY: the value of KEY=... in a result line.
field() {
    local pair
    for pair in $1; do
        if [[ $pair == "$2="* ]]; then
            echo "${pair#*=}"
            return 0
        fi
    done
    die "no $2 in result line: $1"
}

# median V...: the middle value (mean of the two middle ones for an even count).
median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
        END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

# bs_answers: true once the beanstalkd on $BEANSTALKD_PORT answers a command
# (not only accepts: it listens before its binlog is replayed).
bs_answers() {
    local line
    { exec 3<>"/dev/tcp/127.0.0.1/$BEANSTALKD_PORT"; } 2>/dev/null || return 1
    printf 'stats-tube default\r\n' >&3
    read -r -t 60 line <&3 || line=""
    exec 3>&-
    [[ $line == OK* ]]
}

# launch_beanstalkd FLAGS...: beanstalkd on BEANSTALKD_PORT with these flags,
# in WORKDIR and a session of its own, its output appended to
# WORKDIR/beanstalkd.log; sets BEANSTALKD_PID and does not wait.
launch_beanstalkd() {
    (cd "$WORKDIR" && exec setsid beanstalkd -l 127.0.0.1 -p "$BEANSTALKD_PORT" "$@") \
        >>"$WORKDIR/beanstalkd.log" 2>&1 &
    BEANSTALKD_PID=$!
}

# start_beanstalkd FLAGS...: launch_beanstalkd on a random port and wait until
# it answers (bs_answers); on another port if it dies or stays silent,
# START_ATTEMPTS times at most.
start_beanstalkd() {
    local attempt
    for ((attempt = 0; attempt < START_ATTEMPTS; attempt++)); do
        BEANSTALKD_PORT=$(random_port)
        launch_beanstalkd "$@"
        wait_ready "$BEANSTALKD_PID" bs_answers && return 0
        stop_pid "$BEANSTALKD_PID"
        BEANSTALKD_PID=""
    done
    die "beanstalkd did not come up (see $WORKDIR/beanstalkd.log)"
}
