#!/usr/bin/env bash
# Install what Remora needs from Debian 12 packages (only what is missing),
# then configure and build. Usage: scripts/setup.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

pkgs=(build-essential cmake pkg-config python3 libfabric-dev libfabric-bin libpmem2-dev
      libgtest-dev libgmock-dev libbenchmark-dev libibverbs-dev librpma-dev iproute2 procps
      clang libclang-rt-14-dev llvm   # scripts/fuzz.sh: Clang, libFuzzer, llvm-symbolizer
      clang-format                    # scripts/format.sh --check (CI)
      doxygen                         # the C++ API reference (target remora-doc)
      libucx-dev                      # bench/ucx_user.cpp: UCX's put on user memory (remora-bench-ucx-user)
      ucx-utils                       # bench/samehost.sh: ucx_perftest, UCX on its own memory
      debhelper lintian man-db)       # scripts/deb.sh: dpkg-buildpackage of debian/, and its checks
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR="${REMORA_WERROR:-$werror}" >/dev/null
cmake --build "$build" -j"$(nproc)"
echo "setup: built into $build/"
