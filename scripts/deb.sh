#!/usr/bin/env bash
# Build Remora's Debian packages (debian/) with dpkg-buildpackage -b from a
# copy of the source tree, then check them:
#   - each .deb holds what it should (dpkg-deb -c), the compatibility
#     libraries do not depend on libremora0, and their relations to Debian's
#     librpma0/librpma-dev are declared;
#   - libremora-dev holds the C++ API reference (Doxygen HTML);
#   - lintian, if installed (its tags are reported, only errors fail);
#   - the packages unpacked into a throwaway root (dpkg -x): the tools run
#     from it, `man -l` renders the pages (rpma_flush, remora-perf, a DAT
#     page, whichever exist), the C++ API reference documents the main
#     classes (docs/check-reference.sh), and the programs of tests/install/ build
#     against it (CMake and pkg-config) and run on 127.0.0.1.
#
# Usage: scripts/deb.sh [OUT_DIR]      (default: build-deb; the .debs land there)
# Needs the build dependencies of debian/control (scripts/setup.sh installs
# them). REMORA_DEB_JOBS sets the parallel jobs (default 2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/build-deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)
jobs=${REMORA_DEB_JOBS:-2}
t0=$(date +%s)

step() { echo "deb: $*"; }
die() {
  echo "deb: FAIL: $*" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/remora-deb.XXXXXX")
servers=()
cleanup() {
  local pid
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cd "$repo"
dpkg-checkbuilddeps debian/control || die "missing build dependencies (scripts/setup.sh installs them)"
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
cmake_version=$(sed -n 's/^project(remora VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ "${version%%-*}" = "$cmake_version" ] ||
  die "debian/changelog says $version, CMakeLists.txt says $cmake_version"

# ---- build ---------------------------------------------------------------------
# The source as git sees it (tracked and new files, not the build trees), so
# nothing of a local build leaks into the packages.
src=$work/remora-$version
mkdir -p "$src"
git ls-files -z -co --exclude-standard | xargs -0 -I{} sh -c '[ -e "{}" ] && printf "%s\0" "{}"' |
  tar -c --null -T - | tar -x -C "$src"
step "building $version from a copy of the tree ($(find "$src" -type f | wc -l) files)"
tb=$(date +%s)
(cd "$src" && timeout 1500 dpkg-buildpackage -b -us -uc -j"$jobs") >"$work/build.log" 2>&1 || {
  tail -n 60 "$work/build.log" >&2
  die "dpkg-buildpackage (log: tail above)"
}
rm -f "$out"/*.deb "$out"/*.ddeb "$out"/*.buildinfo "$out"/*.changes
mv "$work"/*.deb "$work"/*.buildinfo "$work"/*.changes "$out"/
mv "$work"/*.ddeb "$out"/ 2>/dev/null || true
step "dpkg-buildpackage -b took $(($(date +%s) - tb)) s"

arch=$(dpkg --print-architecture)
deb() { echo "$out/${1}_${version}_$arch.deb"; }
for p in libremora0 libremora-dev remora-tools libremora-rpma0 libremora-rpma-dev libremora-dat1 libremora-dat-dev; do
  [ -f "$(deb $p)" ] || die "no package $p"
done

# ---- contents and relations ------------------------------------------------------
has() {  # has PACKAGE REGEX...: each REGEX matches a path in the package
  local p=$1 list
  shift
  list=$(dpkg-deb -c "$(deb "$p")" | awk '{ print $6 }')
  for re in "$@"; do
    grep -Eq "$re" <<<"$list" || die "$p lacks $re"
  done
}
ml=usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)
has libremora0 "^\./$ml/libremora\.so\.0$" "^\./$ml/libremora\.so\.0\.[0-9.]+$"
has libremora-dev "^\./usr/include/remora/remora\.hpp$" "^\./$ml/libremora\.so$" \
  "^\./$ml/pkgconfig/remora\.pc$" "^\./$ml/cmake/Remora/RemoraConfig\.cmake$" \
  "^\./$ml/cmake/Remora/RemoraConfigVersion\.cmake$" "^\./$ml/cmake/Remora/RemoraTargets\.cmake$" \
  "^\./usr/share/doc/libremora-dev/html/index\.html$" "^\./usr/share/doc/libremora-dev/html/annotated\.html$"
has remora-tools "^\./usr/bin/remora-perf$" "^\./usr/bin/remora-info$" "^\./usr/bin/remora-check$" "^\./usr/share/man/man1/remora-check\.1\.gz$"
has libremora-rpma0 "^\./$ml/librpma\.so\.0$"
has libremora-rpma-dev "^\./usr/include/librpma\.h$" "^\./$ml/librpma\.so$" "^\./$ml/pkgconfig/remora-rpma\.pc$" \
  "^\./$ml/cmake/Remora/RemoraRpmaTargets\.cmake$"
has libremora-dat1 "^\./$ml/libdat\.so\.1$"
has libremora-dat-dev "^\./usr/include/dat/udat\.h$" "^\./$ml/libdat\.so$" "^\./$ml/pkgconfig/remora-dat\.pc$" \
  "^\./$ml/cmake/Remora/RemoraDatTargets\.cmake$" "^\./usr/share/man/man3/dat_ia_open\.3\.gz$"
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
for p in libremora-rpma0 libremora-dat1; do
  case "$(field $p Depends)" in *libremora0*) die "$p depends on libremora0" ;; esac
done
case "$(field remora-tools Depends)" in *libremora0*) ;; *) die "remora-tools does not depend on libremora0" ;; esac
[ "$(field libremora-rpma0 Provides)" = "librpma0 (= 1.2.0)" ] || die "libremora-rpma0: Provides"
[ "$(field libremora-rpma0 Conflicts)" = "librpma0" ] || die "libremora-rpma0: Conflicts"
[ "$(field libremora-rpma-dev Conflicts)" = "librpma-dev" ] || die "libremora-rpma-dev: Conflicts"
for p in libremora0 libremora-dev remora-tools libremora-rpma0 libremora-rpma-dev libremora-dat1 libremora-dat-dev; do
  printf '  %-20s %4s files  Depends: %s\n' "$p" "$(dpkg-deb -c "$(deb $p)" | grep -vc '/$')" \
    "$(dpkg-deb -f "$(deb $p)" Depends)"
done
step "contents and relations as expected"

# ---- lintian --------------------------------------------------------------------------
if command -v lintian >/dev/null; then
  changes=$(ls "$out"/*.changes)
  lintian --tag-display-limit 0 --display-info "$changes" >"$work/lintian.txt" 2>&1 || true
  sed 's/^/  /' "$work/lintian.txt"
  if grep -q '^E: ' "$work/lintian.txt"; then die "lintian reports errors"; fi
  step "lintian: $(grep -c '^E: ' "$work/lintian.txt" || true) errors, $(grep -c '^W: ' "$work/lintian.txt" || true) warnings, $(grep -c '^[IP]: ' "$work/lintian.txt" || true) info/pedantic"
else
  step "lintian is not installed: skipped"
fi

# ---- unpacked into a throwaway root -------------------------------------------------
root=$work/root
for f in "$out"/*.deb; do dpkg -x "$f" "$root"; done
export LD_LIBRARY_PATH=$root/$ml
timeout 30 "$root/usr/bin/remora-info" >"$work/info.txt" 2>&1 || {
  cat "$work/info.txt" >&2
  die "remora-info from the packages"
}
# loads PROGRAM LIB: the file the loader picks for LIB, resolved.
loads() {
  local got
  got=$(ldd "$1" | awk -v l="$2" '$1 == l { print $3 }')
  [ -n "$got" ] && readlink -f "$got"
}
[ "$(loads "$root/usr/bin/remora-perf" libremora.so.0)" = "$(readlink -f "$root/$ml/libremora.so.0")" ] ||
  die "remora-perf does not load the packaged libremora.so.0"
shown=""
for page in man1/remora-perf.1 man3/rpma_flush.3 man7/librpma.7 man3/dat_ia_open.3; do
  f=$root/usr/share/man/$page.gz
  [ -f "$f" ] || continue
  MANWIDTH=80 timeout 30 man -l "$f" >"$work/man.txt" 2>"$work/man.err" || {
    cat "$work/man.err" >&2
    die "man -l $page"
  }
  [ -s "$work/man.txt" ] || die "man -l $page printed nothing"
  shown="$shown $(basename "$page")"
done
[ -n "$shown" ] || die "no manual page to show"
bash "$repo/docs/check-reference.sh" "$root/usr/share/doc/libremora-dev/html" >"$work/doc.txt" 2>&1 || {
  cat "$work/doc.txt" >&2
  die "the C++ API reference of libremora-dev"
}
step "unpacked into a throwaway root: remora-info runs; man -l renders$shown; the C++ API reference documents the main classes"

# The out-of-tree programs against the unpacked packages.
build=$work/check
if ! { timeout 120 cmake -S "$repo/tests/install" -B "$build/cmake" -DCMAKE_PREFIX_PATH="$root/usr" -DWERROR=ON &&
  timeout 300 cmake --build "$build/cmake" -j"$jobs"; } >"$work/check.log" 2>&1; then
  cat "$work/check.log" >&2
  die "tests/install with CMake against the packages"
fi
# Keep -I/-L of /usr (under the sysroot they point into the root).
export PKG_CONFIG_PATH=$root/$ml/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
# shellcheck disable=SC2046  # pkg-config output is a list of flags
timeout 120 cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$repo/tests/install/rpma_check.c" -o "$build/rpma_check" \
  $(pkg-config --cflags --libs remora-rpma) >>"$work/check.log" 2>&1 || {
  cat "$work/check.log" >&2
  die "rpma_check with pkg-config against the packages"
}
[ "$(loads "$build/rpma_check" librpma.so.0)" = "$(readlink -f "$root/$ml/librpma.so.0")" ] ||
  die "rpma_check does not load the packaged librpma.so.0"
run_pair() {  # run_pair PROG PORT_ARG: server, then client; both exit 0
  local prog=$1 port spid log=$work/run.$RANDOM
  if [ "$2" = auto ]; then
    timeout 60 "$prog" server 127.0.0.1 >"$log.server" 2>&1 &
  else
    port=$2
    timeout 60 "$prog" server 127.0.0.1 "$port" >"$log.server" 2>&1 &
  fi
  spid=$!
  servers+=("$spid")
  for ((i = 0; i < 200; i++)); do
    grep -q '^PORT \|^READY' "$log.server" 2>/dev/null && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$2" = auto ] && port=$(awk '/^PORT / { print $2; exit }' "$log.server")
  if ! { timeout 60 "$prog" client 127.0.0.1 "${port:-0}" >"$log.client" 2>&1 && wait "$spid"; }; then
    cat "$log.server" "$log.client" >&2
    die "$(basename "$prog") against the packages"
  fi
}
run_pair "$build/cmake/remora_check" auto
run_pair "$build/rpma_check" "$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
timeout 60 "$build/cmake/dat_check" >/dev/null || die "dat_check against the packages"
step "tests/install built against the packages (CMake, pkg-config) and ran on 127.0.0.1"

step "passed in $(($(date +%s) - t0)) s; packages in ${out#"$repo"/}/"
