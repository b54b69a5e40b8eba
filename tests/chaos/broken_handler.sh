#!/usr/bin/env bash
# chaos.broken_handler: a checker that cannot fail proves nothing. Run the
# chaos against grant_points_unguarded (the handler without the UNIQUE
# guard, registered only with test hooks on) and require the verdict to
# fail with exit status 1 (violations; 2 would be a run that could not be
# carried out) and to name the double grants and the wrong balances.
#
#   bash tests/chaos/broken_handler.sh path/to/onceq-chaos
set -uo pipefail
chaos=${1:?usage: broken_handler.sh path/to/onceq-chaos}
NAME=broken_handler
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_workdir broken

chaos_run --seed 7 --job-type grant_points_unguarded --jobs 400 --rate 100 --customers 20 \
  --redispatch 30 --kills 3 --commit-kills 2 --self-kills 1 --pauses 0 --broker-kills 0 \
  --db-restarts 0 --bursts 1 --dir "$work/run"
[ "$status" -eq 1 ] || fail "onceq-chaos exited with $status, expected 1 (violations)"
grep -q "double grant" "$out" || fail "the verdict does not name the double grants"
grep -qE "customer [0-9]+: balance [0-9]+ is [0-9]+ points above the sum of its grant rows" "$out" ||
  fail "the verdict does not name a balance above its grants"
grep -qE "^  balances above their grant rows \(double grants\) +[1-9]" "$out" ||
  fail "the table does not count the balances above their grants"
grep -q "^FAIL:" "$out" || fail "no FAIL line"
echo "broken_handler: the verdict caught the unguarded handler's double grants"
