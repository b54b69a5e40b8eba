#!/usr/bin/env bash
# Check that every tracked C source is formatted as .clang-format says.
# Lists the files that are not and fails; `clang-format -i FILE` fixes one.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' \) -print)
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "clang-format: ${#bad[@]} file(s) not formatted (run clang-format -i on them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "clang-format: ${#files[@]} files formatted"
