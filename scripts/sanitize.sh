#!/usr/bin/env bash
# Build and run the suite under a sanitizer.
#   scripts/sanitize.sh address   # ASan + UBSan, build dir build-asan
#   scripts/sanitize.sh thread    # TSan, build dir build-tsan
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-address}
case "$kind" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) echo "usage: $0 address|thread" >&2; exit 2 ;;
esac
bash scripts/setup.sh build >/dev/null  # dependencies
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DREMORA_SANITIZE="$kind" -DREMORA_WERROR=ON >/dev/null
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}
bash scripts/test.sh "$dir"
