# The fixture the PHP client's tests and the Laravel driver's share, sourced
# by clients/php/tests/run.sh and clients/laravel/tests/run.sh: a temp dir
# ($work), a project-local PostgreSQL with customers 1 to 6 ($url), CURVE
# keys for an app, an admin, the PHP worker and a C worker ($keys, $me), a
# broker on free loopback ports ($front, $back) and a C onceq-worker of
# queue "c". Every process it starts, and every pid the tests write to
# $work/pids, is stopped by PID on any exit, the cluster is stopped and the
# temp dir removed (ONCEQ_KEEP_TEST_DIR=1 keeps it).
#
# The caller sets before sourcing it: src, bin, wait_s, stop_s, a log
# function, FLEET_NAME (the temp dir's name) and FLEET_WORKER_KEY (the name
# of the PHP worker's key pair in $me).
work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-$FLEET_NAME-XXXXXX")
chmod 755 "$work" # as root the cluster runs as postgres, which must reach it
pids=()
pg_started=0
: >"$work/pids"

alive() {
  [ -r "/proc/$1/stat" ] || return 1
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ "$state" != Z ]
}

stop_pid() {
  local pid=$1 end=$((SECONDS + stop_s))
  kill -TERM "$pid" 2>/dev/null || true
  while alive "$pid" && [ $SECONDS -lt $end ]; do sleep 0.1; done
  if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  # Workers (and their keepers) the tests started and did not stop
  # (phpunit killed, a fatal error).
  while read -r pid; do
    if [ -n "$pid" ] && alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done <"$work/pids"
  for pid in "${pids[@]}"; do
    if alive "$pid"; then stop_pid "$pid"; fi
  done
  if [ "$pg_started" = 1 ]; then
    ONCEQ_BIN=$bin/onceq ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" stop "$work/pg" >/dev/null 2>&1 ||
      log "could not stop the cluster in $work/pg"
  fi
  if [ $rc -ne 0 ]; then
    for f in "$work"/*.log; do
      [ -f "$f" ] || continue
      echo "---- ${f#"$work"/} (last 30 lines)" >&2
      tail -n 30 "$f" >&2
    done
  fi
  if [ -n "${ONCEQ_KEEP_TEST_DIR:-}" ]; then log "kept $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
  perl -MIO::Socket::INET -e \
    'my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0) or die "$!\n";
     print $s->sockport, "\n";'
}

wait_for() {
  local what=$1 end=$((SECONDS + wait_s))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || { log "FAIL: $what: not within ${wait_s}s"; exit 1; }
    sleep 0.1
  done
}

# ---- the database --------------------------------------------------------
pg_port=$(free_port)
pg_started=1
ONCEQ_BIN=$bin/onceq ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" start "$work/pg" >"$work/pg.log" 2>&1 ||
  { log "FAIL: pg.sh start"; exit 1; }
url=$(ONCEQ_PG_PORT=$pg_port bash "$src/deploy/pg.sh" url "$work/pg")
for c in 1 2 3 4 5 6; do
  "$bin/onceq" customer add "$c" --database "$url" >>"$work/customers.log" 2>&1 ||
    { log "FAIL: onceq customer add $c"; exit 1; }
done

# ---- keys ----------------------------------------------------------------
keys=$work/keys
me=$work/me
"$bin/onceq" keygen --dir "$keys" broker >"$work/keygen.log" 2>&1
for name in app admin "$FLEET_WORKER_KEY" c-worker; do
  "$bin/onceq" keygen --dir "$me" "$name" >>"$work/keygen.log" 2>&1
done
mkdir -p "$keys/producers" "$keys/workers" "$keys/admins"
cp "$me/app.key" "$keys/producers/"
cp "$me/admin.key" "$keys/admins/"
cp "$me/$FLEET_WORKER_KEY.key" "$me/c-worker.key" "$keys/workers/"

# ---- the broker (heartbeat 1 s x liveness 3) and a C worker ---------------
front=tcp://127.0.0.1:$(free_port)
back=tcp://127.0.0.1:$(free_port)
"$bin/onceq-broker" --front "$front" --back "$back" --data-dir "$work/data" --keys "$keys" \
  >"$work/broker.log" 2>&1 &
pids+=($!)
wait_for "the broker answering a ping" "$bin/onceq" ping --broker "$front" \
  --key "$me/admin.key_secret" --broker-key "$keys/broker.key"

"$bin/onceq-worker" --broker "$back" --name c-worker --queue c --database "$url" \
  --key "$me/c-worker.key_secret" --broker-key "$keys/broker.key" >"$work/c-worker.log" 2>&1 &
pids+=($!)
