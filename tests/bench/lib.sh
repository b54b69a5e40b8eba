# Helpers shared by the benchmark scripts (run.sh, durable_run.sh,
# curve_run.sh). Sourced, not run. The caller sets SCRIPT (its name, for messages), BUILD,
# STOP_GRACE_TRIES, PORT_BASE, PORT_SPAN, and WORKDIR, BROKER_PID, WORKER_PID,
# BEANSTALKD_PID, REDIS_PID (run.sh) and OK before the traps fire.

die() { echo "$SCRIPT: $*" >&2; exit 1; }

# The build directory as an absolute path: a relative one ("build") would
# make the binaries' paths look like command names to setsid and exec.
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || die "no build directory: $BUILD (build first: bash deploy/build.sh)"

# A binary of the build: in BUILD/bin (the tree's layout), or else next to
# the CMakeLists.txt that declares it.
# The path is absolute: the servers are started from inside WORKDIR.
binary() {
    local name=$1 subdir=$2 build
    build=$(cd "$BUILD" && pwd) || die "no build directory $BUILD"
    if [[ -x $build/bin/$name ]]; then echo "$build/bin/$name"; else echo "$build/$subdir/$name"; fi
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

random_port() { echo $((PORT_BASE + RANDOM % PORT_SPAN)); }

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
