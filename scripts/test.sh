#!/usr/bin/env bash
# The whole test suite (unit, two-process integration, network namespaces,
# examples, tools). Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cd "$build"
ctest --output-on-failure -j"${REMORA_TEST_JOBS:-2}" --timeout 600
