#!/usr/bin/env bash
# Format every C++ source with the project's .clang-format (clang-format 14).
#   scripts/format.sh           # rewrite the files in place
#   scripts/format.sh --check   # list the files that differ; exit 1 if any
# The C ABI headers under compat/*/include keep the layout of the interfaces
# they reproduce and are not formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' | grep -v '^compat/[a-z]*/include/')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    printf 'format: not formatted (run scripts/format.sh): %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
clang-format -i "${files[@]}"
