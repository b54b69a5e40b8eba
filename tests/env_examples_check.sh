#!/usr/bin/env bash
# package.env_examples: the example environment files cannot drift from the
# binaries. Every ONCEQ_* variable that `onceq-broker --help` prints must
# have its line (VAR=..., commented or not) in deploy/examples/broker.env,
# and every one of `onceq-worker --help` in deploy/examples/worker.env; and
# every variable an example sets must still be one its binary reads. A flag
# added without its line in the example fails here.
#
#   bash tests/env_examples_check.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=${1:?usage: env_examples_check.sh SOURCE_DIR BIN_DIR}
bin=${2:?usage: env_examples_check.sh SOURCE_DIR BIN_DIR}
bad=0

for pair in onceq-broker:broker.env onceq-worker:worker.env; do
  program=${pair%%:*}
  example=$src/deploy/examples/${pair#*:}
  [ -f "$example" ] || { echo "env examples: $example is missing" >&2; exit 1; }
  help=$("$bin/$program" --help) || { echo "env examples: $program --help failed" >&2; exit 1; }
  printed=$(grep -o 'ONCEQ_[A-Z0-9_]*' <<<"$help" | sort -u)
  [ -n "$printed" ] || { echo "env examples: $program --help names no ONCEQ_* variable" >&2; exit 1; }
  # The lines that set a variable, commented out or not.
  set_in_example=$(sed -n 's/^#\{0,1\}\(ONCEQ_[A-Z0-9_]*\)=.*/\1/p' "$example" | sort -u)
  missing=$(comm -23 <(echo "$printed") <(echo "$set_in_example"))
  stale=$(comm -13 <(echo "$printed") <(echo "$set_in_example"))
  for v in $missing; do
    echo "env examples: $program --help prints $v, which deploy/examples/${example##*/} does not list" >&2
    bad=1
  done
  for v in $stale; do
    echo "env examples: deploy/examples/${example##*/} sets $v, which $program --help does not print" >&2
    bad=1
  done
  if [ -z "$missing$stale" ]; then
    echo "env examples: $program: $(wc -l <<<"$printed") variables, all in ${example##*/}"
  fi
done
exit $bad
