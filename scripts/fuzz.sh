#!/usr/bin/env bash
# Fuzz every parser of bytes from outside the process (fuzz/README.md).
#   scripts/fuzz.sh [SECONDS_PER_TARGET]    # default 20
# Builds the libFuzzer targets into build-fuzz with Clang (ASan + UBSan),
# runs each over its fuzz/regressions/<target>/ inputs, then fuzzes each for
# SECONDS_PER_TARGET from its seeds in a temporary corpus (the repository is
# not written). Exits non-zero on any finding; the input that found it is
# kept in build-fuzz/artifacts/<target>/.
# REMORA_FUZZ_SKIP_SETUP=1 skips scripts/setup.sh (packages already there).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: $0 [SECONDS_PER_TARGET]" >&2
  exit 2
fi
dir=build-fuzz
targets=(fuzz_remote_region fuzz_wire fuzz_rpma_descriptors fuzz_dat_registry)

[ "${REMORA_FUZZ_SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh build >/dev/null  # dependencies

t0=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$dir" -DREMORA_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_C_FLAGS_FUZZ="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS_FUZZ="-O1 -gline-tables-only" >/dev/null
cmake --build "$dir" --target fuzz_all -j"$(nproc)"
t1=$(date +%s)
echo "fuzz: built in $((t1 - t0)) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# What a failed run said: the input, the error and its first frames.
report() {
  grep -E '^Running: |^SUMMARY|Test unit written' "$1" || true
  grep -E -m1 -A24 'ERROR: |runtime error:|invariant failed' "$1" || tail -n 30 "$1"
}
work=$(mktemp -d "${TMPDIR:-/tmp}/remora-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=()

for t in "${targets[@]}"; do
  bin=$dir/bin/$t
  artifacts=$dir/artifacts/$t
  mkdir -p "$artifacts"
  log=$work/$t.log

  # 1. The regressions: every file, each run once.
  mapfile -t reg < <(find "fuzz/regressions/$t" -type f | sort)
  if ((${#reg[@]})) && ! "$bin" -rss_limit_mb=2048 -timeout=10 "${reg[@]}" >"$log" 2>&1; then
    echo "fuzz: $t FAILED on a regression input"
    report "$log"
    failed+=("$t (regressions)")
    continue
  fi

  # 2. Fuzzing from the target's own seeds plus the regressions, in a
  # corpus of our own that libFuzzer may grow.
  corpus=$work/corpus-$t
  mkdir -p "$corpus"
  if ! REMORA_FUZZ_SEEDS=$corpus "$bin" >"$log" 2>&1; then
    echo "fuzz: $t FAILED writing its seeds"
    report "$log"
    failed+=("$t (seeds)")
    continue
  fi
  ((${#reg[@]})) && cp "${reg[@]}" "$corpus/" 2>/dev/null || true
  if "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    echo "fuzz: $t ok (${secs} s, ${runs:-?} runs, ${cov:-cov: ?}, corpus $(find "$corpus" -type f | wc -l))"
  else
    echo "fuzz: $t FAILED; input kept in $artifacts/"
    report "$log"
    failed+=("$t")
  fi
done

t2=$(date +%s)
echo "fuzz: ran in $((t2 - t1)) s (build $((t1 - t0)) s)"
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]} (to keep one as a test: copy it into fuzz/regressions/<target>/)"
  exit 1
fi
echo "fuzz: no findings"
