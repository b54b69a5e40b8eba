#!/usr/bin/env bash
# chaos.shipment_review: the shipments' verdict with outcomes nobody can
# know. With one try per shipment job, a reply the carrier drops leaves the
# job in review (outcome unknown on the last try) and a 503 fails it (no
# tries left, nothing happened). Neither is a violation: the order waits in
# review with a reason, or sits in the failed store with one. Require exit
# status 0, jobs in review counted, orders in review and orders failed
# with a reason counted, and the handler's rows in review.
#
#   bash tests/chaos/shipment_review.sh path/to/onceq-chaos
set -uo pipefail
chaos=${1:?usage: shipment_review.sh path/to/onceq-chaos}
NAME=shipment_review
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_workdir review

chaos_run --seed 5 --jobs 400 --ship-tries 1 --carrier-drop-rate 0.2 --carrier-error-rate 0.1 \
  --kills 0 --commit-kills 0 --self-kills 0 --pauses 0 --broker-kills 0 --db-restarts 0 \
  --bursts 0 --carrier-stalls 0 --carrier-errors 0 --carrier-delays 0 --dir "$work/run"
[ "$status" -eq 0 ] || fail "onceq-chaos exited with $status, expected 0 (no violation)"
grep -qE "^  jobs in review \(shipments' queue\) +[1-9]" "$out" || fail "no job in review counted"
grep -qE "^  confirmed orders in review, shipment exists +[1-9]" "$out" ||
  fail "no order in review counted"
grep -qE "^  confirmed orders failed with a reason, no shipment +[1-9]" "$out" ||
  fail "no order failed with a reason counted"
grep -qE "^  shipment rows: confirmed/review/failed/requested +[0-9]+ / [1-9]" "$out" ||
  fail "no shipment row in review"
grep -q "^PASS:" "$out" || fail "no PASS line"
echo "shipment_review: orders in review or failed with a reason pass the verdict"
