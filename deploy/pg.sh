#!/usr/bin/env bash
# The embedded default database: a project-local PostgreSQL cluster.
#
#   deploy/pg.sh start [DIR]    create (first time) and start the cluster, create
#                               the database and apply the migrations
#   deploy/pg.sh stop [DIR]     stop it (fast shutdown)
#   deploy/pg.sh restart [DIR] [fast|immediate]
#   deploy/pg.sh url [DIR]      print the libpq conninfo for ONCEQ_DATABASE_URL
#   deploy/pg.sh status [DIR]
#
# DIR defaults to .local/pg at the top of the checkout, or for an installed
# copy (PREFIX/share/onceq/pg.sh) to ~/.local/share/onceq/pg, and as root to
# /var/lib/onceq/pg, where the postgres user can enter (ONCEQ_PG_DIR). The
# cluster listens on a unix socket in DIR and on 127.0.0.1:PORT (ONCEQ_PG_PORT,
# default 54329), with extra server options from ONCEQ_PG_SERVER_OPTS (e.g.
# "-c max_connections=20"). As root, the server runs as the `postgres` user, since
# initdb refuses root. Set ONCEQ_DATABASE_URL to use an existing server
# instead; nothing here is needed then. The migrations run with the onceq
# binary of the same install or build (ONCEQ_BIN to name another).
set -euo pipefail
# The script's own directory, a link not followed: deploy/ in a checkout,
# PREFIX/share/onceq installed, BUILD/share/onceq in a build tree.
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(basename "$here")" = onceq ] && [ "$(basename "$(dirname "$here")")" = share ]; then
  if [ "$(id -u)" -eq 0 ]; then
    # The server runs as postgres, which cannot enter /root.
    default_dir=/var/lib/onceq/pg
  else
    default_dir=${XDG_DATA_HOME:-$HOME/.local/share}/onceq/pg
  fi
  default_onceq=$here/../../bin/onceq
else
  default_dir=$here/../.local/pg
  default_onceq=$here/../build/bin/onceq
fi
[ -x "$default_onceq" ] || default_onceq=$(command -v onceq || echo "$default_onceq")
cmd=${1:-}
dir=${2:-${ONCEQ_PG_DIR:-$default_dir}}
port=${ONCEQ_PG_PORT:-54329}
db=${ONCEQ_PG_DB:-onceq}
user=onceq
server_opts=${ONCEQ_PG_SERVER_OPTS:-}
pgbin=${ONCEQ_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}

[ -x "$pgbin/pg_ctl" ] || { echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

conninfo() { echo "host=$dir port=$port dbname=$db user=$user"; }

case "$cmd" in
start)
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$pgbin/initdb" -D "$dir/data" -U "$user" --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  if ! as_owner "$pgbin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
      -o "-k $dir -p $port -c listen_addresses=127.0.0.1 -c max_connections=200 $server_opts" >/dev/null ||
      { tail -20 "$dir/server.log" >&2; exit 1; }
  fi
  if ! "$pgbin/psql" -h "$dir" -p "$port" -U "$user" -d postgres -tAc \
       "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    "$pgbin/createdb" -h "$dir" -p "$port" -U "$user" "$db"
  fi
  onceq=${ONCEQ_BIN:-$default_onceq}
  if [ -x "$onceq" ]; then
    ONCEQ_DATABASE_URL=$(conninfo) "$onceq" db migrate
  else
    echo "pg.sh: $onceq not built yet; run 'onceq db migrate' to apply the migrations" >&2
  fi
  ;;
stop)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
  fi
  ;;
restart)
  mode=${3:-fast}
  as_owner "$pgbin/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 restart \
    -o "-k $dir -p $port -c listen_addresses=127.0.0.1 -c max_connections=200 $server_opts" >/dev/null
  ;;
url) conninfo ;;
status) as_owner "$pgbin/pg_ctl" -D "$dir/data" status ;;
*)
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  [ "$cmd" = "-h" ] || [ "$cmd" = "--help" ] || [ "$cmd" = help ]
  ;;
esac
