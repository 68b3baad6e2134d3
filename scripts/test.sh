#!/usr/bin/env bash
# The whole test suite.
#   scripts/test.sh              # the format check (scripts/format.sh), then
#                                # the plain build: unit, two-process integration,
#                                # network namespaces, examples, tools, an
#                                # install into a temporary prefix; then the
#                                # Debian packages (scripts/deb.sh, build-deb);
#                                # the same suite under ASan+UBSan (build-asan)
#                                # and every fuzz target for 15 s (build-fuzz)
#   scripts/test.sh BUILD_DIR    # the ctest suite of BUILD_DIR only
# REMORA_QUICK=1 runs the plain suite only.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then
  cd "$1"
  exec ctest --output-on-failure -j"${REMORA_TEST_JOBS:-2}" --timeout 600
fi
t0=$(date +%s)
bash scripts/format.sh --check
(cd build && ctest --output-on-failure -j"${REMORA_TEST_JOBS:-2}" --timeout 600)
t1=$(date +%s)
echo "test: plain suite passed in $((t1 - t0)) s"
[ "${REMORA_QUICK:-}" = 1 ] && exit 0
bash scripts/deb.sh
t1b=$(date +%s)
echo "test: Debian packages built and checked in $((t1b - t1)) s"
t1=$t1b
bash scripts/sanitize.sh address
t2=$(date +%s)
echo "test: ASan+UBSan build and suite passed in $((t2 - t1)) s"
REMORA_FUZZ_SKIP_SETUP=1 bash scripts/fuzz.sh "${REMORA_FUZZ_SECONDS:-15}"
t3=$(date +%s)
echo "test: fuzzing passed in $((t3 - t2)) s; everything in $((t3 - t0)) s"
