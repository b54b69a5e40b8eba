#!/usr/bin/env bash
# layers.includes: the one-way dependencies of docs/handlers.md and
# README.md, checked on the sources:
#   - libonceq-effects knows nothing of the wire protocol or the worker
#     runtime (onceq/effects_worker.h, the header-only glue, is the one file
#     that includes both, by design);
#   - the points and shipments apps and the onceq tool include only public
#     headers of the layers below (onceq/... from an include/ directory)
#     and their own;
#   - nothing under common/ refers to a target or a source under worker/;
#   - inside the broker (docs/design.md, "Where each concept lives"): the
#     engine (broker/engine*.c/h) and the leaf structures it is built on
#     include only engine headers, leaf structures and public headers;
#     neither the engine nor the journal (journal, record, replay, compact,
#     lease_key) includes the loop: broker.h, broker_internal.h, the
#     command table (commands.h) or zmq.h.
#
#   bash tests/layers.sh SOURCE_DIR
set -uo pipefail
top=${1:?usage: layers.sh SOURCE_DIR}
cd "$top" || exit 2
bad=0
say() { echo "layers: $*" >&2; bad=1; }

# Quoted includes of the given files, as "file:header".
includes() { grep -Ho '^#include "[^"]*"' "$@" | sed 's/#include "\(.*\)"/\1/'; }

# A public header: onceq/NAME.h under one of the include/ directories.
public() {
  case $1 in onceq/*) ;; *) return 1 ;; esac
  [ -f "common/include/$1" ] || [ -f "worker/include/$1" ] || [ -f "worker/effects/include/$1" ]
}

while IFS=: read -r file header; do
  case $file in */effects_worker.h) continue ;; esac
  case $header in
    onceq/proto.h | onceq/worker.h | onceq/client.h | worker_limits.h | points/* | shipments/* | pg/*)
      say "$file includes $header: the effects layer must not know the protocol, the worker runtime or the apps" ;;
  esac
done < <(includes worker/effects/*.c worker/effects/*.h worker/effects/include/onceq/*.h)

while IFS=: read -r file header; do
  case $header in points/*) continue ;; esac
  public "$header" || say "$file includes $header: the points app may include only public headers (onceq/...) and its own (points/...)"
done < <(includes worker/points/*.c worker/points/*.h)

while IFS=: read -r file header; do
  case $header in shipments/*) continue ;; esac
  public "$header" || say "$file includes $header: the shipments app may include only public headers (onceq/...) and its own (shipments/...)"
done < <(includes worker/shipments/*.c worker/shipments/*.h)

while IFS=: read -r file header; do
  case $header in points/*) continue ;; esac
  [ -f "clients/cli/$header" ] && continue
  public "$header" || say "$file includes $header: the onceq tool may include only public headers, the points app's and its own"
done < <(includes clients/cli/*.c clients/cli/*.h)

if grep -rnE 'onceq_points|onceq_worker|onceq_effects|worker/' common/ >&2; then
  say "common/ refers to the worker or the layers above it (lines above)"
fi

# The broker's leaf structures: data structures and hashes over plain
# memory, which the engine builds on and which know nothing of it.
leaves="heap idmap idset list unique overlap dedupe siphash histogram review_log throttle"
leaf() {
  local name=${1%.h}
  case " $leaves " in *" $name "*) return 0 ;; esac
  return 1
}
# broker/ files of the engine and of its leaves, as they exist.
engine_files=$(ls broker/engine*.c broker/engine*.h 2>/dev/null)
for name in $leaves; do
  for f in "broker/$name.c" "broker/$name.h"; do [ -f "$f" ] && engine_files="$engine_files $f"; done
done
journal_files=$(ls broker/journal.[ch] broker/record.[ch] broker/replay.[ch] broker/compact.[ch] \
  broker/lease_key.[ch] 2>/dev/null)

# shellcheck disable=SC2086
while IFS=: read -r file header; do
  case $header in engine*.h) continue ;; esac
  leaf "$header" && continue
  public "$header" && continue
  say "$file includes $header: the engine and its leaf structures include only engine headers (engine*.h), leaf structures ($leaves) and public headers"
done < <(includes $engine_files)

# shellcheck disable=SC2086
while IFS=: read -r file header; do
  case $header in
    broker.h | broker_internal.h | commands.h | gate*.h | front*.h | back*.h | waits.h | report.h)
      say "$file includes $header: the engine and the journal must not know the broker's loop" ;;
  esac
done < <(includes $engine_files $journal_files)

# (czmq's containers are fine; its sockets and libzmq's are the loop's.)
# shellcheck disable=SC2086
if grep -HnE '^#include <zmq\.h>' $engine_files $journal_files >&2; then
  say "the engine or the journal includes zmq.h (lines above): sockets are the loop's"
fi

[ "$bad" -eq 0 ] && echo "layers: the dependencies run one way"
exit "$bad"
