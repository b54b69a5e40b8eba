# shellcheck shell=bash disable=SC2034,SC2154 # chaos is the caller's, status is read by it
# Helpers shared by the chaos scripts (broken_handler.sh, broken_shipments.sh,
# shipment_review.sh, worker_args.sh). Sourced, not run. The caller sets
# NAME (its name, for messages) and chaos (the onceq-chaos binary) first.

# chaos_workdir SUFFIX: a fresh $work ($TMPDIR/onceq-chaos-SUFFIX-XXXXXX),
# $out (onceq-chaos's output) in it, and its removal on exit unless
# ONCEQ_KEEP_TEST_DIR asks to look at it: a failed run (some of these scripts
# make it fail on purpose) leaves onceq-chaos's own directory behind.
chaos_workdir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/onceq-chaos-$1-XXXXXX") || exit 2
    chmod 755 "$work" # as root, the cluster runs as postgres and must reach its directory
    out=$work/out.txt
    trap chaos_cleanup EXIT
}

chaos_cleanup() { if [ -z "${ONCEQ_KEEP_TEST_DIR:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi; }

# chaos_run FLAGS...: run onceq-chaos with them, its output in $out and
# printed, its exit status in $status.
chaos_run() {
    "$chaos" "$@" >"$out" 2>&1
    status=$?
    cat "$out"
}

# fail WHY: say why the script failed, and exit 1.
fail() { echo "$NAME: $*" >&2; exit 1; }
