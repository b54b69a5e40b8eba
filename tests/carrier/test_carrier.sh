#!/usr/bin/env bash
# Black-box tests of onceq-carrier: start the real binary on a free loopback
# port in a temp dir, speak HTTP to it with curl, read its answers with jq.
#   test_carrier.sh PATH/TO/onceq-carrier SCENARIO
# Every wait polls for a condition with a deadline; every process started
# here is stopped by its PID when the test ends, passed or failed.
set -euo pipefail

bin=$1
scenario=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/onceq-carrier-test.XXXXXX")
pids=()
carrier_pid=
base=

cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$scenario]: $*" >&2
  if [ -f "$tmp/carrier.err" ]; then
    echo "--- carrier log ---" >&2
    tail -n 50 "$tmp/carrier.err" >&2
  fi
  exit 1
}

# start_carrier FLAGS...: start it on port 0 and read the port it prints.
start_carrier() {
  # The background job truncates the file only once it runs: a previous
  # carrier's "listening on" line (a test that starts several) must not be
  # read in the meantime, or the base would be its port, or nothing.
  rm -f "$tmp/carrier.out"
  "$bin" --bind 127.0.0.1 --port 0 --seed 7 "$@" >"$tmp/carrier.out" 2>"$tmp/carrier.err" &
  carrier_pid=$!
  pids+=("$carrier_pid")
  local i
  for i in $(seq 1 200); do # 20 s at most
    local at
    at=$(sed -n 's/^listening on //p' "$tmp/carrier.out" 2>/dev/null || true)
    if [ -n "$at" ]; then
      base="http://$at"
      return 0
    fi
    kill -0 "$carrier_pid" 2>/dev/null || fail "onceq-carrier exited at start"
    sleep 0.1
  done
  fail "onceq-carrier did not print its port within 20 s"
}

# post NAME KEY BODY [CURL ARGS...]: POST /shipments; the status goes to
# NAME.code ("000": no reply) with the seconds it took on a second line,
# the headers to NAME.h, the body to NAME.b and curl's exit status to
# NAME.rc. An empty KEY sends no key header.
post() {
  local name=$1 key=$2 body=$3
  shift 3
  local hdr=()
  [ -n "$key" ] && hdr=(-H "Idempotency-Key: $key")
  local rc=0
  curl -s --max-time 60 -o "$tmp/$name.b" -D "$tmp/$name.h" -w '%{http_code}\n%{time_total}' \
    -X POST -H 'Content-Type: application/json' "${hdr[@]}" --data-binary "$body" "$@" \
    "$base/shipments" >"$tmp/$name.code" || rc=$?
  echo "$rc" >"$tmp/$name.rc"
}

code() { head -n 1 "$tmp/$1.code"; }
seconds() { sed -n 2p "$tmp/$1.code"; }
replayed() { grep -qi '^Idempotent-Replayed: true' "$tmp/$1.h"; }
shipments() { curl -sf --max-time 30 "$base/shipments"; }

expect_code() {
  local got
  got=$(code "$1")
  [ "$got" = "$2" ] || fail "$1: expected HTTP $2, got $got: $(cat "$tmp/$1.b" 2>/dev/null)"
}

expect_eq() { # WHAT GOT WANT
  [ "$2" = "$3" ] || fail "$1: expected $3, got $2"
}

body42='{"order_id": 42, "address": "1 Quay Street", "items": [{"sku": "MUG-1", "qty": 2}]}'
# The same JSON value, keys in another order and other white space.
body42_reordered='{"items":[{"qty":2,"sku":"MUG-1"}],"address":"1 Quay Street","order_id":42}'
body43='{"order_id": 43, "address": "2 Quay Street"}'

case "$scenario" in

idempotency)
  start_carrier
  post first shipment-request:42 "$body42"
  expect_code first 201
  replayed first && fail "a first answer carries Idempotent-Replayed"
  ref=$(jq -r .reference "$tmp/first.b")
  expect_eq "first reference" "$ref" SHP-000001

  post again shipment-request:42 "$body42_reordered"
  expect_code again 201
  replayed again || fail "the same key and body again has no Idempotent-Replayed: true"
  cmp -s "$tmp/first.b" "$tmp/again.b" || fail "a replay's body differs from the first answer"

  post other shipment-request:42 "$body43"
  expect_code other 422
  expect_eq "422 error" "$(jq -r .error "$tmp/other.b")" idempotency_key_reused
  expect_eq "422 reference" "$(jq -r .reference "$tmp/other.b")" SHP-000001

  post nokey "" "$body43"
  expect_code nokey 400
  expect_eq "no key error" "$(jq -r .error "$tmp/nokey.b")" missing_idempotency_key
  post longkey "$(printf 'k%.0s' $(seq 1 256))" "$body43"
  expect_code longkey 400
  expect_eq "long key error" "$(jq -r .error "$tmp/longkey.b")" invalid_idempotency_key
  post badjson k-bad '{"order_id": 43,'
  expect_code badjson 400
  expect_eq "bad JSON error" "$(jq -r .error "$tmp/badjson.b")" invalid_json
  post badfield k-bad '{"order_id": "43", "address": "x"}'
  expect_code badfield 400
  jq -r .message "$tmp/badfield.b" | grep -q order_id || fail "a bad order_id is not named"

  head -c 20000 /dev/zero | tr '\0' x >"$tmp/big"
  post big k-big "@$tmp/big"
  expect_code big 413
  post bigchunked k-big "@$tmp/big" -H 'Transfer-Encoding: chunked'
  expect_code bigchunked 413

  list=$(shipments)
  expect_eq "shipments" "$(jq .count <<<"$list")" 1
  expect_eq "requests of the key" "$(jq '.shipments[0].requests' <<<"$list")" 3
  expect_eq "replays of the key" "$(jq '.shipments[0].replays' <<<"$list")" 1
  expect_eq "conflicts of the key" "$(jq '.shipments[0].conflicts' <<<"$list")" 1
  expect_eq "key listed" "$(jq -r '.shipments[0].idempotency_key' <<<"$list")" shipment-request:42
  expect_eq "body listed" "$(jq -c '.shipments[0].request.items' <<<"$list")" \
    '[{"sku":"MUG-1","qty":2}]'
  one=$(curl -sf --max-time 30 "$base/shipments/SHP-000001")
  expect_eq "GET one" "$(jq -r .idempotency_key <<<"$one")" shipment-request:42
  got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$base/shipments/SHP-000002")
  expect_eq "an unknown reference" "$got" 404
  ;;

error_rate)
  start_carrier --error-rate 1.0
  post e1 shipment-request:7 "$body42"
  expect_code e1 503
  expect_eq "503 error" "$(jq -r .error "$tmp/e1.b")" injected_error
  list=$(shipments)
  expect_eq "shipments after a 503" "$(jq .count <<<"$list")" 0
  expect_eq "injected errors" "$(jq .totals.injected_errors <<<"$list")" 1
  # Faults off: the same key is new to the carrier, so the 503 did nothing.
  curl -sf --max-time 30 -X PUT -d '{"error_rate": 0}' "$base/faults" >/dev/null
  post e2 shipment-request:7 "$body42"
  expect_code e2 201
  replayed e2 && fail "a key only ever answered 503 was replayed"
  expect_eq "shipments" "$(shipments | jq .count)" 1
  ;;

drop_reply)
  start_carrier --drop-reply-rate 1.0
  post d1 shipment-request:9 "$body42"
  expect_eq "curl exit status (52: empty reply)" "$(cat "$tmp/d1.rc")" 52
  expect_code d1 000
  list=$(shipments)
  expect_eq "shipments after a dropped reply" "$(jq .count <<<"$list")" 1
  expect_eq "dropped answers of the key" "$(jq '.shipments[0].dropped' <<<"$list")" 1
  ref=$(jq -r '.shipments[0].reference' <<<"$list")
  post d2 shipment-request:9 "$body42"
  expect_eq "second dropped reply" "$(cat "$tmp/d2.rc")" 52
  curl -sf --max-time 30 -X PUT -d '{"drop_reply_rate": 0}' "$base/faults" >/dev/null
  post d3 shipment-request:9 "$body42"
  expect_code d3 201
  replayed d3 || fail "the retry after dropped replies is not marked replayed"
  expect_eq "the retry's reference" "$(jq -r .reference "$tmp/d3.b")" "$ref"
  list=$(shipments)
  expect_eq "shipments after the retries" "$(jq .count <<<"$list")" 1
  expect_eq "requests of the key" "$(jq '.shipments[0].requests' <<<"$list")" 3
  ;;

delay)
  # A long delay: while A's reply waits, B is taken and processed, and GET
  # answers. A server that slept in its handler would process nothing
  # until A's reply had gone out.
  delay_ms=8000
  start_carrier --delay-ms "$delay_ms"
  post a shipment-request:1 "$body42" &
  a_pid=$!
  pids+=("$a_pid")
  listed() { shipments | jq -e --arg k "$1" 'any(.shipments[]; .idempotency_key == $k)' >/dev/null; }
  for i in $(seq 1 100); do listed shipment-request:1 && break; sleep 0.05; done
  listed shipment-request:1 || fail "A was not processed before its reply"
  post b shipment-request:2 "$body43" &
  b_pid=$!
  pids+=("$b_pid")
  for i in $(seq 1 100); do listed shipment-request:2 && break; sleep 0.05; done
  listed shipment-request:2 || fail "B was not processed while A's reply waited"
  kill -0 "$a_pid" 2>/dev/null || fail "A's reply came before B was processed: not delayed"
  wait "$a_pid"
  wait "$b_pid"
  for r in a b; do
    expect_code "$r" 201
    secs=$(seconds "$r")
    awk -v s="$secs" -v d="$delay_ms" 'BEGIN { exit !(s * 1000 >= d) }' ||
      fail "$r was answered after $secs s, before the ${delay_ms} ms delay"
  done
  ;;

concurrent)
  # 20 identical requests at once: one shipment, one first answer, 19
  # replays, every answer the same.
  start_carrier
  cpids=()
  for i in $(seq 1 20); do
    post "c$i" shipment-request:5 "$body42" &
    cpids+=("$!")
    pids+=("$!")
  done
  for p in "${cpids[@]}"; do wait "$p"; done
  first=0
  for i in $(seq 1 20); do
    expect_code "c$i" 201
    cmp -s "$tmp/c1.b" "$tmp/c$i.b" || fail "answer $i differs from answer 1"
    replayed "c$i" || first=$((first + 1))
  done
  expect_eq "answers not marked replayed" "$first" 1
  list=$(shipments)
  expect_eq "shipments" "$(jq .count <<<"$list")" 1
  expect_eq "requests of the key" "$(jq '.shipments[0].requests' <<<"$list")" 20
  ;;

seed)
  # The same seed and the same requests: the same replies dropped.
  run() {
    start_carrier --drop-reply-rate 0.5 --seed "$1"
    local out="" i
    for i in $(seq 1 20); do
      post "s$i" "k$i" "{\"order_id\": $i, \"address\": \"x\"}"
      out+="$(cat "$tmp/s$i.rc") "
    done
    kill "$carrier_pid"
    wait "$carrier_pid" || fail "onceq-carrier exited non-zero on SIGTERM"
    echo "$out"
  }
  one=$(run 11)
  two=$(run 11)
  other=$(run 12)
  expect_eq "drops of a second run with the same seed" "$two" "$one"
  [ "$one" != "$other" ] || fail "seeds 11 and 12 dropped the same replies: $one"
  grep -q 52 <<<"$one" || fail "rate 0.5 dropped no reply in 20: $one"
  grep -q '\b0\b' <<<"$one" || fail "rate 0.5 dropped every reply in 20: $one"
  ;;

limits)
  start_carrier --max-shipments 2 --first-reference 41
  post l1 k1 "$body42"
  expect_eq "first reference" "$(jq -r .reference "$tmp/l1.b")" SHP-000041
  post l2 k2 "$body42"
  post l3 k3 "$body42"
  expect_code l3 507
  expect_eq "507 error" "$(jq -r .error "$tmp/l3.b")" capacity_reached
  post l4 k1 "$body42"
  expect_code l4 201
  replayed l4 || fail "a known key is not replayed at the limit"
  expect_eq "shipments" "$(shipments | jq .count)" 2
  ;;

stop)
  # SIGTERM while a reply waits out its delay: the reply goes out, exit 0.
  start_carrier --delay-ms 600000
  post p shipment-request:3 "$body42" &
  p_pid=$!
  pids+=("$p_pid")
  for i in $(seq 1 100); do
    [ "$(shipments | jq .count)" = 1 ] && break
    sleep 0.05
  done
  kill -TERM "$carrier_pid"
  rc=0
  wait "$carrier_pid" || rc=$?
  expect_eq "exit status on SIGTERM" "$rc" 0
  wait "$p_pid"
  expect_code p 201
  ;;

usage)
  "$bin" --help | grep -q -- '--drop-reply-rate' || fail "--help does not list the faults"
  "$bin" --version | grep -q '^onceq-carrier ' || fail "--version"
  for bad in "--error-rate 1.5" "--drop-reply-rate -0.1" "--port 70000" "--delay-ms 600001" \
    "--max-shipments 0" "--seed x"; do
    rc=0
    # shellcheck disable=SC2086
    "$bin" $bad >/dev/null 2>"$tmp/usage.err" || rc=$?
    expect_eq "exit status of $bad" "$rc" 2
    grep -q -- "${bad#* }" "$tmp/usage.err" || fail "the error for $bad does not name the value"
  done
  rc=0
  "$bin" --bind not-an-address --port 0 >/dev/null 2>"$tmp/usage.err" || rc=$?
  expect_eq "exit status of a bad --bind" "$rc" 1
  grep -q not-an-address "$tmp/usage.err" || fail "the --bind error does not name the value"
  ;;

*)
  echo "unknown scenario $scenario" >&2
  exit 2
  ;;
esac
echo "ok [$scenario]"
