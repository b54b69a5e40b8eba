#!/usr/bin/env bash
# package.install: the Debian packages, installed on this machine for real.
#
#   - builds them (deploy/package.sh into PACKAGE_BUILD_DIR: onceq and
#     onceq-testing) and checks their files: no source or build path
#     (tests/install_check.sh on the unpacked .debs), the files this test
#     expects in each, none of the test tools (onceq-test-worker,
#     onceq-chaos, onceq-carrier) in onceq, the dependencies dpkg-shlibdeps
#     found, and onceq-testing's on the same version of onceq;
#   - `dpkg -i` of onceq alone: the onceq system user, /var/lib/onceq and
#     /etc/onceq exist, the broker's CURVE pair in /etc/onceq/keys (0600,
#     the onceq user's), every file of `dpkg -L onceq` is there and none of
#     the test tools is, the libraries are in the linker cache, pkg-config
#     and man find theirs, and the installed units pass
#     `systemd-analyze verify`; then `dpkg -i` of onceq-testing: its tools
#     and man pages are there, load their libraries and answer --help;
#   - runs the broker and a worker from /usr/bin as the onceq user, each with
#     its unit's ExecStart and configured the way the units are, by its
#     Environment= and the ONCEQ_* lines in /etc/onceq/broker.env and
#     /etc/onceq/worker-POOL.env, speaking CURVE (an admin key for the tool
#     and a worker key for the pool made with the installed `onceq keygen`)
#     (no systemctl: systemd need not be running), against a temporary
#     PostgreSQL cluster started with the installed pg.sh on a loopback port,
#     migrated with the installed `onceq db migrate`;
#   - dispatches a noop and a grant_points job, and the same grant again:
#     2 grants done, 1 of them already_applied, the balance granted once;
#   - stops everything by PID, then `dpkg -r onceq-testing` (none of its
#     files left), `dpkg -r onceq` (no file of the package left; the journal
#     in /var/lib/onceq and /etc/onceq kept) and `dpkg -P` (those gone too;
#     the onceq user kept, as docs/operations.md says).
#
# It changes the machine, so it refuses to run where a package onceq or
# onceq-testing, or /var/lib/onceq or /etc/onceq, is there already (purge
# would delete them), except for the packages of a run of this test that was
# killed before its cleanup (marked by /etc/onceq/.package-test), which it
# purges.
# Runs on one machine take turns (a lock in /run/lock), and a dpkg call
# that meets another process's dpkg lock is tried again, both for a bounded
# time. It needs root and dpkg: where it cannot run it says why and exits 77,
# which ctest reports as skipped; with CI=true it exits 1 instead, since CI
# runs as root and must run it. On any exit it stops what it started, purges
# the packages and removes the onceq user if it made them
# (ONCEQ_KEEP_TEST_DIR=1 keeps its temp dir).
#
#   bash tests/package_test.sh SOURCE_DIR [PACKAGE_BUILD_DIR]
set -euo pipefail
src=$(cd "${1:?usage: package_test.sh SOURCE_DIR [PACKAGE_BUILD_DIR]}" && pwd -P)
pkg_build=${2:-$src/build-deb}

# Extra flags for the broker, the worker and the onceq tool (word-split),
# for a broker that must be told --insecure or given CURVE keys.
read -r -a broker_flags <<<"${ONCEQ_PACKAGE_TEST_BROKER_FLAGS:-}"
read -r -a worker_flags <<<"${ONCEQ_PACKAGE_TEST_WORKER_FLAGS:-}"
read -r -a client_flags <<<"${ONCEQ_PACKAGE_TEST_CLIENT_FLAGS:-}"

wait_s=60 # bound on anything the test waits for
stop_s=20 # bound on a graceful stop before SIGKILL
pool=pkgtest
started=$SECONDS

log() { echo "package test: $*" >&2; }
cannot_run() {
  log "cannot run: $*"
  if [ "${CI:-}" = true ]; then exit 1; fi
  exit 77
}

[ "$(id -u)" -eq 0 ] || cannot_run "it installs the package with dpkg -i and needs root (run it as root, as CI does)"
for tool in dpkg dpkg-deb dpkg-query dpkg-architecture dpkg-shlibdeps systemd-analyze adduser \
            deluser setpriv help2man file jq perl flock; do
  command -v "$tool" >/dev/null || cannot_run "$tool is missing (bash deploy/install-deps.sh)"
done
# One run at a time on a machine: the package database, the onceq user,
# /etc/onceq and /var/lib/onceq are the machine's, and a second run would
# install over the first's packages, or purge them as an interrupted run's.
# A run of another checkout waits here for the one under way (at most
# lock_s), and holds the lock until it exits.
lock_s=900
exec {lock_fd}>/run/lock/onceq-package-test.lock
flock -w "$lock_s" "$lock_fd" ||
  cannot_run "another run of this test has held /run/lock/onceq-package-test.lock for ${lock_s}s"
# dpkg, tried again while another process (apt, unattended-upgrades) holds
# its lock, for at most lock_s; its output in the log given.
dpkg_run() {
  local log=$1 end=$((SECONDS + lock_s))
  shift
  until dpkg "$@" >"$log" 2>&1; do
    grep -qi 'lock' "$log" && [ $SECONDS -lt $end ] || return 1
    sleep 1
  done
}
# A run of this test that was killed (no trap runs on SIGKILL) leaves its
# packages installed, with its mark in /etc/onceq: purge those.
mark=/etc/onceq/.package-test
packages=(onceq-testing onceq) # in the order they are removed
# A package's dpkg status, empty if dpkg has none.
pkg_status() {
  local s
  s=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)
  [ "$s" = "unknown ok not-installed" ] || echo "$s"
}
if [ -f "$mark" ]; then
  for p in "${packages[@]}"; do
    status=$(pkg_status "$p")
    [ -n "$status" ] || continue
    log "an interrupted run of this test left its package $p ($status): purging it"
    purge_log=$(mktemp)
    dpkg_run "$purge_log" -P "$p" ||
      cannot_run "could not purge the package an interrupted run left (dpkg -P $p): $(tail -3 "$purge_log")"
    rm -f "$purge_log"
  done
fi
for p in "${packages[@]}"; do
  status=$(pkg_status "$p")
  [ -z "$status" ] ||
    cannot_run "a package $p is on this machine already ($status); this test would replace and purge it (dpkg -P $p first)"
done
for dir in /var/lib/onceq /etc/onceq; do
  [ ! -e "$dir" ] || cannot_run "$dir exists; purging the package would delete it"
done
# The installed binaries must load the package's libraries, not those of
# another install the dynamic linker finds first (/usr/local/lib is searched
# before /usr/lib/x86_64-linux-gnu).
if other=$(ldconfig -p | grep -E 'libonceq(-worker|-effects)?\.so\.0 '); then
  cannot_run "another onceq's libraries are in the linker cache, which the installed binaries would load: $other"
fi

# Nothing of the caller's setup may leak in.
unset LD_LIBRARY_PATH ONCEQ_BIN ONCEQ_DATABASE_URL ONCEQ_PG_DIR ONCEQ_WORKER_BROKER ONCEQ_BROKER \
  PKG_CONFIG_PATH

work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-package-XXXXXX")
chmod 755 "$work" # the cluster runs as postgres, the binaries as onceq
pids=()
pg_started=0
installed=0
had_user=0
if getent passwd onceq >/dev/null; then had_user=1; fi
had_group=0
if getent group onceq >/dev/null; then had_group=1; fi

fail() {
  log "FAIL: $*"
  for f in "$work"/*.log; do
    [ -f "$f" ] || continue
    echo "---- ${f#"$work"/} (last 20 lines)" >&2
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
# Sets stopped_status to its exit status.
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
    ONCEQ_PG_PORT=$pg_port bash "$pg_script" stop "$work/pg" >/dev/null 2>&1 ||
      log "could not stop the cluster in $work/pg"
  fi
  if [ "$installed" = 1 ]; then
    for p in "${packages[@]}"; do
      [ -z "$(pkg_status "$p")" ] && continue
      dpkg_run "$work/cleanup-purge-$p.log" -P "$p" || log "could not purge the package (dpkg -P $p)"
    done
  fi
  if [ "$had_user" = 0 ] && getent passwd onceq >/dev/null; then
    deluser --system --quiet onceq >/dev/null 2>&1 || log "could not remove the onceq user"
  fi
  if [ "$had_group" = 0 ] && getent group onceq >/dev/null; then
    delgroup --system --quiet onceq >/dev/null 2>&1 || log "could not remove the onceq group"
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

# ---- build and inspect the packages ----------------------------------------

t0=$SECONDS
debs=$(bash "$src/deploy/package.sh" "$pkg_build" 2>"$work/package.log") || fail "deploy/package.sh failed"
build_s=$((SECONDS - t0))
testing_deb=
{ read -r deb; read -r testing_deb || true; } <<<"$debs"
case "$(basename "$deb")" in
onceq_*_amd64.deb) ;;
*) fail "deploy/package.sh made $deb first, not onceq_VERSION_amd64.deb" ;;
esac
# onceq alone, as production installs it.
dpkg-deb -x "$deb" "$work/root"
bash "$src/tests/install_check.sh" "$src" "$pkg_build" "$work/root" >"$work/install-check.log" 2>&1 ||
  fail "the package's files: $(cat "$work/install-check.log")"

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$multiarch
units=/usr/lib/systemd/system
binaries=(onceq-broker onceq-worker onceq onceq-web)
# The test tools: a worker that can SIGKILL itself after COMMIT and runs an
# unguarded grant handler has no place beside the production worker.
test_tools=(onceq-test-worker onceq-chaos onceq-carrier)
expected=()
for b in "${binaries[@]}"; do expected+=("/usr/bin/$b" "/usr/share/man/man1/$b.1.gz"); done
testing_expected=()
for b in "${test_tools[@]}"; do testing_expected+=("/usr/bin/$b" "/usr/share/man/man1/$b.1.gz"); done
for l in libonceq libonceq-worker libonceq-effects; do
  expected+=("$libdir/$l.so" "$libdir/$l.so.0" "$libdir/pkgconfig/${l#lib}.pc")
done
for h in client clock config effects effects_worker flags limits log paths proto worker; do
  expected+=("/usr/include/onceq/$h.h")
done
expected+=(/usr/share/onceq/pg.sh /usr/share/onceq/sql/0001_points.sql /usr/share/onceq/sql/0002_once.sql
  "$units/onceq-broker.service" "$units/onceq-worker@.service"
  /usr/share/doc/onceq/examples/broker.env /usr/share/doc/onceq/examples/worker.env)
for f in "${expected[@]}"; do
  [ -e "$work/root$f" ] || fail "the package has no $f"
done
for f in "${testing_expected[@]}"; do
  [ ! -e "$work/root$f" ] || fail "the onceq package ships $f, a test tool (it belongs in onceq-testing)"
done

depends=$(dpkg-deb -f "$deb" Depends)
for d in adduser postgresql-client libzmq5 libczmq4 libpq5 libc6; do
  grep -q "\(^\|, \)$d\( \|,\|$\)" <<<"$depends" || fail "the package does not depend on $d: $depends"
done
deb_bytes=$(stat -c %s "$deb")
deb_files=$(dpkg-deb -c "$deb" | grep -vc '^d')

# ---- install ---------------------------------------------------------------

installed=1
dpkg_run "$work/dpkg-install.log" -i "$deb" || fail "dpkg -i $deb"
touch "$mark"
[ "$(dpkg-query -W -f='${Status}' onceq)" = "install ok installed" ] ||
  fail "dpkg says: $(dpkg-query -W -f='${Status}' onceq)"
dpkg -L onceq | sort >"$work/package-files"
for b in "${test_tools[@]}"; do
  if grep -qx "/usr/bin/$b\|/usr/share/man/man1/$b.1.gz" "$work/package-files"; then
    fail "dpkg -L onceq lists $b, a test tool: $(grep "$b" "$work/package-files" | tr '\n' ' ')"
  fi
  [ ! -e "/usr/bin/$b" ] || fail "/usr/bin/$b is there with only the onceq package installed"
done

entry=$(getent passwd onceq) || fail "no onceq user after dpkg -i"
IFS=: read -r _ _ uid _ _ home shell <<<"$entry"
[ "$uid" -lt 1000 ] || fail "the onceq user is not a system user (uid $uid)"
[ "$home" = /var/lib/onceq ] || fail "the onceq user's home is $home, not /var/lib/onceq"
case "$shell" in */nologin | */false) ;; *) fail "the onceq user can log in ($shell)" ;; esac
[ "$(stat -c %U /var/lib/onceq)" = onceq ] || fail "/var/lib/onceq is not owned by onceq"
[ -d /etc/onceq ] || fail "no /etc/onceq after dpkg -i"
keys=/etc/onceq/keys
[ -f "$keys/broker.key_secret" ] && [ -f "$keys/broker.key" ] ||
  fail "dpkg -i made no broker key pair in $keys"
[ "$(stat -c '%U %a' "$keys/broker.key_secret")" = "onceq 600" ] ||
  fail "$keys/broker.key_secret is $(stat -c '%U %a' "$keys/broker.key_secret"), not onceq 600"
for role in producers workers admins; do
  [ -d "$keys/$role" ] || fail "dpkg -i made no $keys/$role"
done

for f in "${expected[@]}"; do
  [ -e "$f" ] || fail "$f is not installed"
done
while IFS= read -r f; do
  [ -e "$f" ] || [ -L "$f" ] || fail "dpkg -L lists $f, which is not there"
done <"$work/package-files"
# (Read whole: grep -q would quit early and fail the pipe under pipefail.
# With a merged /usr, ldconfig may name /lib for /usr/lib.)
cache=$(ldconfig -p)
for l in libonceq libonceq-worker libonceq-effects; do
  grep -Eq "^\s$l\.so\.0 .*=> (/usr)?/lib/$multiarch/$l\.so\.0$" <<<"$cache" ||
    fail "$l.so.0 is not in the linker cache"
done
for b in "${binaries[@]}"; do
  libs=$(ldd "/usr/bin/$b") || fail "ldd /usr/bin/$b"
  if grep -q 'not found' <<<"$libs"; then fail "/usr/bin/$b: $(grep 'not found' <<<"$libs")"; fi
done
pc=$(pkg-config --cflags --libs onceq-worker onceq-effects) || fail "pkg-config onceq-worker onceq-effects"
case "$pc" in *pkgconfig* | *"$src"* | *"$pkg_build"*) fail "pkg-config gives $pc" ;; esac
if command -v man >/dev/null; then
  for b in "${binaries[@]}"; do
    [ "$(man -M /usr/share/man -w "$b" 2>/dev/null)" = "/usr/share/man/man1/$b.1.gz" ] ||
      fail "man does not find $b(1)"
  done
  man_check=yes
else
  man_check=no
fi
# Any output is a finding: systemd-analyze exits 0 on warnings.
if ! out=$(systemd-analyze verify --man=$man_check "$units/onceq-broker.service" "$units/onceq-web.service" \
             "$units/onceq-worker@.service" 2>&1) || [ -n "$out" ]; then
  fail "systemd-analyze verify on the installed units: $out"
fi

# ---- onceq-testing on top --------------------------------------------------

# The second line of deploy/package.sh; unpacked with onceq under it.
case "$(basename "${testing_deb:-none}")" in
onceq-testing_*_amd64.deb) ;;
*) fail "deploy/package.sh printed '$debs', not onceq_VERSION_amd64.deb and onceq-testing_VERSION_amd64.deb, one a line" ;;
esac
[ "$(wc -l <<<"$debs")" = 2 ] || fail "deploy/package.sh printed more than the two packages: $debs"
dpkg-deb -x "$deb" "$work/root-testing"
dpkg-deb -x "$testing_deb" "$work/root-testing"
bash "$src/tests/install_check.sh" "$src" "$pkg_build" "$work/root-testing" \
  >"$work/install-check-testing.log" 2>&1 ||
  fail "the packages' files with onceq-testing: $(cat "$work/install-check-testing.log")"
for f in "${testing_expected[@]}"; do
  [ -e "$work/root-testing$f" ] || fail "onceq-testing has no $f"
done
# onceq-testing holds the test tools and nothing else.
testing_files=$(dpkg-deb -c "$testing_deb" | grep -v '^d' | sed 's/.* \.\//\//' | sort)
[ "$testing_files" = "$(printf '%s\n' "${testing_expected[@]}" | sort)" ] ||
  fail "onceq-testing holds other files than the test tools: $testing_files"
version=$(dpkg-deb -f "$deb" Version)
testing_depends=$(dpkg-deb -f "$testing_deb" Depends)
grep -q "\(^\|, \)onceq (= $version)\(,\|$\)" <<<"$testing_depends" ||
  fail "onceq-testing does not depend on onceq (= $version): $testing_depends"
testing_bytes=$(stat -c %s "$testing_deb")

# Installed: its tools load the installed libraries and run.
dpkg_run "$work/dpkg-install-testing.log" -i "$testing_deb" || fail "dpkg -i $testing_deb"
[ "$(dpkg-query -W -f='${Status}' onceq-testing)" = "install ok installed" ] ||
  fail "dpkg says of onceq-testing: $(dpkg-query -W -f='${Status}' onceq-testing)"
dpkg -L onceq-testing | sort >"$work/testing-files"
for f in "${testing_expected[@]}"; do
  [ -e "$f" ] || fail "$f is not installed by onceq-testing"
done
for b in "${test_tools[@]}"; do
  libs=$(ldd "/usr/bin/$b") || fail "ldd /usr/bin/$b"
  if grep -q 'not found' <<<"$libs"; then fail "/usr/bin/$b: $(grep 'not found' <<<"$libs")"; fi
  "/usr/bin/$b" --help >"$work/help-$b.log" 2>&1 || fail "/usr/bin/$b --help"
  if [ "$man_check" = yes ] &&
     [ "$(man -M /usr/share/man -w "$b" 2>/dev/null)" != "/usr/share/man/man1/$b.1.gz" ]; then
    fail "man does not find $b(1)"
  fi
done

# ---- the database: the installed pg.sh and onceq db migrate ----------------

pg_script=/usr/share/onceq/pg.sh
pg_port=$(free_port)
pg_started=1
# No migration from pg.sh: the installed onceq does it below.
ONCEQ_PG_PORT=$pg_port ONCEQ_BIN=$work/no-onceq bash "$pg_script" start "$work/pg" >"$work/pg.log" 2>&1 ||
  fail "the installed pg.sh did not start the cluster"
db_url="postgresql:///onceq?host=$work/pg&port=$pg_port&user=onceq"
/usr/bin/onceq db migrate --database "$db_url" >"$work/migrate.log" 2>&1 ||
  fail "onceq db migrate"
grep -q '^applied 0001_points' "$work/migrate.log" && grep -q '^applied 0002_once' "$work/migrate.log" ||
  fail "onceq db migrate did not apply the installed migrations: $(cat "$work/migrate.log")"
# CURVE: an admin key for the tool, a worker key for the pool (readable by
# the onceq user the worker runs as), allowed in the broker's directories.
/usr/bin/onceq keygen --dir "$work/keys" admin >"$work/keygen.log" 2>&1 || fail "onceq keygen admin"
/usr/bin/onceq keygen --dir /etc/onceq/pool-keys "$pool" >>"$work/keygen.log" 2>&1 ||
  fail "onceq keygen $pool"
chown onceq:onceq "/etc/onceq/pool-keys/$pool.key_secret"
cp "$work/keys/admin.key" "$keys/admins/"
cp "/etc/onceq/pool-keys/$pool.key" "$keys/workers/"
if [ -z "${ONCEQ_PACKAGE_TEST_CLIENT_FLAGS:-}" ]; then
  client_flags=(--key "$work/keys/admin.key_secret" --broker-key "$keys/broker.key")
fi
onceq_tool() { /usr/bin/onceq "${client_flags[@]}" "$@"; }
onceq_tool customer add 42 --database "$db_url" >>"$work/migrate.log" 2>&1 || fail "onceq customer add 42"

# ---- broker and worker, as the units run them ------------------------------

front=tcp://127.0.0.1:$(free_port)
back=tcp://127.0.0.1:$(free_port)
printf 'ONCEQ_FRONT=%s\nONCEQ_BACK=%s\n' "$front" "$back" >/etc/onceq/broker.env
printf 'ONCEQ_WORKER_BROKER=%s\nONCEQ_DATABASE_URL=%s\nONCEQ_WORKER_NAME=%s\n' \
  "$back" "$db_url" "$pool" >"/etc/onceq/worker-$pool.env"
printf 'ONCEQ_WORKER_KEY=%s\nONCEQ_BROKER_KEY=%s\n' "/etc/onceq/pool-keys/$pool.key_secret" \
  "$keys/broker.key" >>"/etc/onceq/worker-$pool.env"

# What systemd would do with the unit: its ExecStart, as its User, with its
# Environment= and then the ONCEQ_* lines of its EnvironmentFiles (which
# win), and for the broker its StateDirectory. setpriv execs, so $! is the
# process itself.
run_unit() {
  local unit=$1 log=$2 instance=${3:-}
  shift 3
  local file=$units/$unit
  local cmd env=() f specifier=%i
  read -r -a cmd <<<"$(sed -n 's/^ExecStart=//p' "$file")"
  while IFS= read -r line; do env+=("$line"); done < <(sed -n 's/^Environment=\(ONCEQ_[A-Z0-9_]*=.*\)/\1/p' "$file")
  while IFS= read -r f; do
    f=${f#-}
    f=${f//"$specifier"/$instance}
    [ -f "$f" ] || continue
    while IFS= read -r line; do env+=("$line"); done < <(grep -E '^ONCEQ_[A-Z0-9_]+=' "$f")
  done < <(sed -n 's/^EnvironmentFile=//p' "$file")
  env "${env[@]}" setpriv --reuid=onceq --regid=onceq --init-groups -- "${cmd[@]}" "$@" \
    >"$work/$log" 2>&1 &
  pids+=($!)
}

state_dir=$(sed -n 's/^StateDirectory=//p' "$units/onceq-broker.service")
install -d -o onceq -g onceq -m 0750 "/var/lib/$state_dir"
run_unit onceq-broker.service broker.log "" "${broker_flags[@]}"
broker_pid=$!
wait_for "the installed broker answering a ping" onceq_tool ping --broker "$front"

run_unit onceq-worker@.service worker.log "$pool" "${worker_flags[@]}"
worker_pid=$!
stats() { onceq_tool stats --json --broker "$front"; }
worker_up() { stats | jq -e --arg n "$pool" '[.workers[].name] | map(select(startswith($n))) | length == 1'; }
wait_for "the installed worker connected" worker_up

# ---- jobs ------------------------------------------------------------------

grant='{"order_id": 1001, "customer_id": 42, "points": 50}'
onceq_tool dispatch noop --broker "$front" >>"$work/dispatch.log" 2>&1 || fail "onceq dispatch noop"
onceq_tool dispatch grant_points --broker "$front" --payload "$grant" >>"$work/dispatch.log" 2>&1 ||
  fail "onceq dispatch grant_points"
# The same order again, as a double click would: its effect is already there.
onceq_tool dispatch grant_points --broker "$front" --payload "$grant" >>"$work/dispatch.log" 2>&1 ||
  fail "onceq dispatch grant_points (again)"
settled() {
  stats | jq -e '(.types[] | select(.name == "noop") | .done == 1 and .failed == 0)
                 and (.types[] | select(.name == "grant_points") | .done == 2 and .failed == 0)
                 and ([.queues[] | .ready + .leased + .delayed] | add == 0)'
}
wait_for "the noop and both grant_points jobs done" settled
final=$(stats)
[ "$(jq '.types[] | select(.name == "grant_points") | .duplicates' <<<"$final")" = 1 ] ||
  fail "the second grant was not already_applied: $(jq -c '.types' <<<"$final")"
balance=$(onceq_tool balance 42 --database "$db_url") || fail "onceq balance 42"
[ "$balance" = 50 ] || fail "customer 42's balance is $balance, not 50 (granted once)"

# ---- stop by PID -----------------------------------------------------------

stop_pid "$worker_pid"
[ "$stopped_status" = 0 ] || fail "the worker exited with status $stopped_status after SIGTERM"
stop_pid "$broker_pid"
[ "$stopped_status" = 0 ] || fail "the broker exited with status $stopped_status after SIGTERM"
journal_files=$(find "/var/lib/$state_dir" -type f | wc -l)
[ "$journal_files" -gt 0 ] || fail "the broker left no journal in /var/lib/$state_dir"
[ "$(stat -c %U "/var/lib/$state_dir")" = onceq ] || fail "/var/lib/$state_dir is not the onceq user's"
ONCEQ_PG_PORT=$pg_port bash "$pg_script" stop "$work/pg" >>"$work/pg.log" 2>&1 || fail "pg.sh stop"
pg_started=0

# ---- remove, then purge ----------------------------------------------------

# Only what is the package's alone: directories such as /usr/bin stay. The
# files of onceq (package-files), or those of the list given.
package_left() {
  local f found=() list=${1:-$work/package-files}
  while IFS= read -r f; do
    if [ -d "$f" ] && [ ! -L "$f" ]; then
      case "$f" in /usr/include/onceq | /usr/share/onceq* | /usr/share/doc/onceq*) ;; *) continue ;; esac
    fi
    if [ -e "$f" ] || [ -L "$f" ]; then found+=("$f"); fi
  done <"$list"
  echo "${found[*]}"
}
dpkg_run "$work/dpkg-remove-testing.log" -r onceq-testing || fail "dpkg -r onceq-testing"
left=$(package_left "$work/testing-files")
[ -z "$left" ] || fail "dpkg -r onceq-testing left files of the package: $left"
dpkg_run "$work/dpkg-remove.log" -r onceq || fail "dpkg -r onceq"
left=$(package_left)
[ -z "$left" ] || fail "dpkg -r left files of the package: $left"
cache=$(ldconfig -p)
for l in libonceq libonceq-worker libonceq-effects; do
  if grep -q "$l.so.0 " <<<"$cache"; then fail "$l.so.0 is still in the linker cache after dpkg -r"; fi
done
[ "$(find "/var/lib/$state_dir" -type f | wc -l)" = "$journal_files" ] ||
  fail "dpkg -r did not keep the journal in /var/lib/$state_dir"
[ -f /etc/onceq/broker.env ] && [ -f "/etc/onceq/worker-$pool.env" ] && [ -f "$mark" ] ||
  fail "dpkg -r did not keep /etc/onceq"

dpkg_run "$work/dpkg-purge.log" -P onceq || fail "dpkg -P onceq"
installed=0
[ ! -e /var/lib/onceq ] || fail "dpkg -P left /var/lib/onceq"
[ ! -e /etc/onceq ] || fail "dpkg -P left /etc/onceq"
status=$(dpkg-query -W -f='${Status}' onceq 2>/dev/null || true)
[ -z "$status" ] || [ "$status" = "unknown ok not-installed" ] || fail "dpkg -P left the package as '$status'"
left=$(package_left)
[ -z "$left" ] || fail "dpkg -P left files of the package: $left"
getent passwd onceq >/dev/null || fail "dpkg -P removed the onceq user; docs/operations.md says it stays"

log "ok: $(basename "$deb"), $deb_bytes bytes, $deb_files files, no test tool;" \
  "$(basename "$testing_deb"), $testing_bytes bytes, the ${#test_tools[@]} test tools; built in ${build_s}s;" \
  "installed, ran noop + grant_points (+1 already_applied) from /usr/bin as onceq, removed and" \
  "purged clean; $((SECONDS - started))s in all"
