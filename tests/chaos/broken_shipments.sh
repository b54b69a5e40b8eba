#!/usr/bin/env bash
# chaos.broken_shipments: the shipments' verdict must be able to fail too.
# Run the chaos with request_shipment_unkeyed (the shipment handler's twin
# that keys its call by the job id, registered only with test hooks on):
# every re-dispatched order then makes a second shipment at the carrier.
# Require exit status 1 (violations), the orders with more than one
# shipment named and counted, and the grants untouched (no double grant:
# the failure is the shipments').
#
#   bash tests/chaos/broken_shipments.sh path/to/onceq-chaos
set -uo pipefail
chaos=${1:?usage: broken_shipments.sh path/to/onceq-chaos}
NAME=broken_shipments
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_workdir broken-ship

chaos_run --seed 7 --ship-type request_shipment_unkeyed --jobs 300 --rate 100 --customers 20 \
  --redispatch 30 --kills 2 --commit-kills 0 --self-kills 0 --pauses 0 --broker-kills 0 \
  --db-restarts 0 --bursts 0 --carrier-stalls 0 --carrier-errors 1 --carrier-delays 0 \
  --dir "$work/run"
[ "$status" -eq 1 ] || fail "onceq-chaos exited with $status, expected 1 (violations)"
grep -qE "order [0-9]+ has [0-9]+ shipments at the carrier" "$out" ||
  fail "the verdict does not name an order with two shipments"
grep -qE "was made under the key job-[0-9]+, not the business key shipment-request:[0-9]+" "$out" ||
  fail "the verdict does not name a shipment made under the job's key"
grep -qE "^  orders with more than one shipment +[1-9]" "$out" ||
  fail "the table does not count the orders with more than one shipment"
grep -qE "^  orders with more than one grant row +0$" "$out" ||
  fail "the grants should be untouched"
grep -q "^FAIL:" "$out" || fail "no FAIL line"
echo "broken_shipments: the verdict caught the unkeyed handler's second shipments"
