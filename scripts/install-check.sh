#!/usr/bin/env bash
# Remora as a program outside the tree sees it: install BUILD_DIR into a
# temporary prefix, build the programs of tests/install/ against the
# installed files twice (CMake with find_package(Remora), and plain compiler
# calls with pkg-config: remora, remora-rpma, remora-dat), check that they
# load the installed libraries, and run them on 127.0.0.1:
#   remora_check  C++ API: server and client, write + visibility flush +
#                 read back, the server checks its buffer after the client left
#   rpma_check    the same through the librpma face (librpma.h, -lrpma)
#   dat_check     the DAT face: the registry lists ofi-tcp-lo, which opens
# plus the installed remora-info, the installed man pages through man, and
# the installed C++ API reference (Doxygen HTML, docs/check-reference.sh;
# skipped, saying so, when the build made none: doxygen absent or
# REMORA_DOCS=OFF).
# Warnings are errors. Every step is bounded by `timeout`; the prefix and
# any server left running are removed on exit.
#
# Usage: scripts/install-check.sh [BUILD_DIR]   (default: build)
# ctest runs it as install.check (label install).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
src=$repo/tests/install
address=127.0.0.1
jobs=${REMORA_INSTALL_CHECK_JOBS:-2}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/remora-install-check.XXXXXX")
servers=()
cleanup() {
  local pid
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
step() { echo "install-check: $*"; }
die() {
  echo "install-check: FAIL: $*" >&2
  exit 1
}

# ---- install ------------------------------------------------------------------
t0=$(date +%s)
prefix=$tmp/prefix
timeout 120 cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log" >&2
  die "cmake --install"
}
pcfile=$(find "$prefix" -path '*/pkgconfig/remora.pc' | head -n1)
[ -n "$pcfile" ] || die "no remora.pc installed"
libdir=$(dirname "$(dirname "$pcfile")")
for f in "$libdir"/libremora.so "$libdir"/libremora.so.0 "$libdir"/librpma.so "$libdir"/librpma.so.0 \
  "$libdir"/libdat.so "$libdir"/libdat.so.1 "$libdir"/cmake/Remora/RemoraConfig.cmake \
  "$libdir"/cmake/Remora/RemoraConfigVersion.cmake "$libdir"/cmake/Remora/RemoraTargets.cmake \
  "$libdir"/pkgconfig/remora-rpma.pc "$libdir"/pkgconfig/remora-dat.pc \
  "$prefix"/include/remora/remora.hpp "$prefix"/include/librpma.h "$prefix"/include/dat/udat.h \
  "$prefix"/bin/remora-perf "$prefix"/bin/remora-info; do
  [ -e "$f" ] || die "not installed: ${f#"$prefix"/}"
done
nman=$(find "$prefix/share/man" -name '*.[137]' 2>/dev/null | wc -l)
step "installed into a temporary prefix: $(find "$prefix" -type f | wc -l) files, $nman man pages"

# ---- the installed tools and man pages -------------------------------------------
timeout 30 "$prefix/bin/remora-info" >"$tmp/info.txt" 2>&1 || {
  cat "$tmp/info.txt" >&2
  die "installed remora-info"
}
# remora-check only sets the checking spec and runs the program: a program
# that is not a Remora one exits with its own status.
[ -x "$prefix/bin/remora-check" ] || die "remora-check is not installed"
"$prefix/bin/remora-check" reuse -- sh -c 'test "$REMORA_CHECK" = reuse' ||
  die "installed remora-check did not run the program with REMORA_CHECK=reuse"
# loads PROGRAM LIB: the file the loader picks for LIB, resolved.
loads() {
  local got
  got=$(ldd "$1" | awk -v l="$2" '$1 == l { print $3 }')
  [ -n "$got" ] && readlink -f "$got"
}
[ "$(loads "$prefix/bin/remora-perf" libremora.so.0)" = "$(readlink -f "$libdir/libremora.so.0")" ] ||
  die "remora-perf does not load the installed libremora.so.0"
shown=""
if [ "$nman" -gt 0 ] && command -v man >/dev/null; then
  # `man NAME` with MANPATH set to the prefix must find and render the
  # installed page: these if present, else the first one.
  names=()
  for page in man3/rpma_flush.3 man1/remora-perf.1 man7/librpma.7 man3/dat_ia_open.3; do
    [ -f "$prefix/share/man/$page" ] && names+=("$(basename "${page%.*}")")
  done
  if ((${#names[@]} == 0)); then
    page=$(find "$prefix/share/man" -name '*.[137]' | sort | head -n1)
    names=("$(basename "${page%.*}")")
  fi
  for name in "${names[@]}"; do
    where=$(MANPATH=$prefix/share/man timeout 30 man -w "$name" 2>/dev/null || true)
    case "$where" in "$prefix"/*) ;; *) die "man does not find the installed page $name (got '$where')" ;; esac
    MANPATH=$prefix/share/man MANWIDTH=80 timeout 30 man "$name" >"$tmp/man.txt" 2>/dev/null ||
      die "man $name"
    [ -s "$tmp/man.txt" ] || die "man $name printed nothing"
    shown="$shown $name"
  done
  step "installed remora-info runs; man renders$shown"
else
  step "installed remora-info runs"
fi

# ---- the installed C++ API reference ---------------------------------------------
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
docdir=$(cache_value CMAKE_INSTALL_DOCDIR)
case "$docdir" in
  "") docdir=$prefix/share/doc/remora ;;
  /*) ;;
  *) docdir=$prefix/$docdir ;;
esac
if [ "$(cache_value REMORA_DOCS)" = ON ]; then
  bash "$repo/docs/check-reference.sh" "$docdir/html" >"$tmp/doc.log" 2>&1 || {
    cat "$tmp/doc.log" >&2
    die "the installed C++ API reference"
  }
  step "installed C++ API reference in ${docdir#"$prefix"/}/html: $(find "$docdir/html" -name '*.html' | wc -l) pages, the main classes documented"
elif ! command -v doxygen >/dev/null; then
  step "C++ API reference: SKIPPED, doxygen is not installed (apt-get install doxygen, then configure again)"
else
  step "C++ API reference: SKIPPED, this build has REMORA_DOCS=OFF (configured before doxygen was installed? -DREMORA_DOCS=ON)"
fi

# ---- build: CMake (find_package) ---------------------------------------------------
out_cmake=$tmp/cmake
timeout 120 cmake -S "$src" -B "$out_cmake" -DCMAKE_PREFIX_PATH="$prefix" -DWERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/cmake-configure.log" 2>&1 || {
  cat "$tmp/cmake-configure.log" >&2
  die "cmake configure of tests/install"
}
timeout 300 cmake --build "$out_cmake" -j"$jobs" >"$tmp/cmake-build.log" 2>&1 || {
  cat "$tmp/cmake-build.log" >&2
  die "cmake build of tests/install"
}
step "built with find_package(Remora): $(grep -o 'Remora [0-9.]* from .*' "$tmp/cmake-configure.log" | sed "s|$prefix|PREFIX|")"

# ---- build: pkg-config ---------------------------------------------------------------
out_pc=$tmp/pkgconfig
mkdir -p "$out_pc"
export PKG_CONFIG_PATH=$libdir/pkgconfig
warn=(-Wall -Wextra -Wpedantic -Werror)
# shellcheck disable=SC2046  # pkg-config output is a list of flags
{
  timeout 300 c++ -std=c++20 -O1 "${warn[@]}" "$src/remora_check.cpp" -o "$out_pc/remora_check" \
    $(pkg-config --cflags --libs remora) &&
    timeout 120 cc -std=c11 -O1 "${warn[@]}" "$src/rpma_check.c" -o "$out_pc/rpma_check" \
      $(pkg-config --cflags --libs remora-rpma) &&
    timeout 120 cc -std=c11 -O1 "${warn[@]}" "$src/dat_check.c" -o "$out_pc/dat_check" \
      $(pkg-config --cflags --libs remora-dat)
} >"$tmp/pc-build.log" 2>&1 || {
  cat "$tmp/pc-build.log" >&2
  die "pkg-config build of tests/install"
}
step "built with pkg-config: $(pkg-config --cflags --libs remora-rpma | sed "s|$prefix|PREFIX|g")"

# Each program must load the installed library, not the build tree's nor a
# system one (Debian's librpma.so.0 may be installed too).
for dir in "$out_cmake" "$out_pc"; do
  for pair in remora_check:libremora.so.0 rpma_check:librpma.so.0 dat_check:libdat.so.1; do
    prog=${pair%%:*}
    lib=${pair#*:}
    got=$(loads "$dir/$prog" "$lib" || true)
    [ "$got" = "$(readlink -f "$libdir/$lib")" ] || die "$dir/$prog loads $lib from '${got:-nowhere}', not from the prefix"
  done
done

# ---- run -----------------------------------------------------------------------------
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# wait_line FILE PATTERN PID: until FILE has a line matching PATTERN (20 s).
wait_line() {
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# run_pair NAME PROG: server in the background, client in the foreground;
# both must exit 0.
run_pair() {
  local name=$1 prog=$2 port spid log=$tmp/$1
  if [ "$(basename "$prog")" = remora_check ]; then
    timeout 60 "$prog" server "$address" >"$log.server" 2>&1 &
    spid=$!
    servers+=("$spid")
    wait_line "$log.server" '^PORT ' "$spid" || {
      cat "$log.server" >&2
      die "$name: server did not start"
    }
    port=$(awk '/^PORT / { print $2; exit }' "$log.server")
  else
    port=$(free_port)
    timeout 60 "$prog" server "$address" "$port" >"$log.server" 2>&1 &
    spid=$!
    servers+=("$spid")
    wait_line "$log.server" '^READY' "$spid" || {
      cat "$log.server" >&2
      die "$name: server did not start"
    }
  fi
  timeout 60 "$prog" client "$address" "$port" >"$log.client" 2>&1 || {
    cat "$log.client" "$log.server" >&2
    die "$name: client"
  }
  wait "$spid" || {
    cat "$log.server" >&2
    die "$name: server"
  }
  step "ran $name: $(tail -n1 "$log.client"); $(tail -n1 "$log.server")"
}
for kind in cmake pkgconfig; do
  dir=$out_cmake
  [ $kind = pkgconfig ] && dir=$out_pc
  run_pair "$kind/remora_check" "$dir/remora_check"
  run_pair "$kind/rpma_check" "$dir/rpma_check"
  timeout 60 "$dir/dat_check" >"$tmp/dat.log" 2>&1 || {
    cat "$tmp/dat.log" >&2
    die "$kind/dat_check"
  }
  step "ran $kind/dat_check: $(tail -n1 "$tmp/dat.log")"
done
step "passed in $(($(date +%s) - t0)) s"
