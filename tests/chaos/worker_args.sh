#!/usr/bin/env bash
# chaos.worker_args: the workers get every --worker-arg after the harness's
# own flags, so a later one wins over the harness's. Run a small quiet run
# with --worker-arg --name --worker-arg chaos-extra (the harness passes
# --name chaos itself) and require the broker to have registered the
# workers under that name only, and the plan to list the args.
#
#   bash tests/chaos/worker_args.sh path/to/onceq-chaos
set -uo pipefail
chaos=${1:?usage: worker_args.sh path/to/onceq-chaos}
NAME=worker_args
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_workdir args

chaos_run --seed 3 --jobs 100 --no-faults \
  --worker-arg --name --worker-arg chaos-extra --keep --dir "$work/run"
[ "$status" -eq 0 ] || fail "onceq-chaos exited with $status, expected 0"
grep -q "workers also get: --name chaos-extra" "$out" || fail "the plan does not list the args"
grep -q 'name "chaos-extra"' "$work/run/broker.log" ||
  fail "the workers did not register under the name given by --worker-arg"
grep -q 'name "chaos"' "$work/run/broker.log" && fail "a worker kept the harness's own --name"
echo "worker_args: the workers got the extra arguments, after ours"
