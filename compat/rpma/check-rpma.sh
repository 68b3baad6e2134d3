#!/usr/bin/env bash
# Acceptance test of the librpma face with programs written by others:
# librpma 1.2.0's own examples and fio 3.33's librpma engines, built unchanged
# from their git mirrors against compat/rpma/include/librpma.h and run, client
# and server, on 127.0.0.1 over our librpma.so.0.
#
# Usage: compat/rpma/check-rpma.sh RPMA_MIRROR FIO_MIRROR [BUILD_DIR]
#   RPMA_MIRROR  git directory of github.com/pmem/rpma (tag $RPMA_TAG, 1.2.0)
#   FIO_MIRROR   git directory of github.com/axboe/fio (tag $FIO_TAG, fio-3.33)
#   BUILD_DIR    Remora build tree holding librpma.so.0 (default: build)
#
# Sources are extracted with `git archive` into a cache directory
# ($REMORA_UPSTREAM_CACHE, default ${TMPDIR:-/tmp}/remora-upstream-cache),
# keyed on the mirror commit and on our librpma.h, so a rerun only runs.
# Nothing is copied into the repository.
#
# Environment: RPMA_TAG, FIO_TAG, REMORA_UPSTREAM_CACHE, CHECK_PORT (first
# TCP port, default 7304), CHECK_ONLY (regular expression: run only the cases
# whose name matches), CHECK_KEEP=1 (keep the run directory with the logs).
#
# Output: one "PASS <case>" or "FAIL <case>" line per case (a failing case
# is followed by the tail of its logs, indented), the last line is
# "N passed, M failed". Exit status 0 only if nothing failed.
set -u -o pipefail

usage() { echo "usage: $0 RPMA_MIRROR FIO_MIRROR [BUILD_DIR]" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

gitdir_of() {  # a mirror is either a git dir or a work tree with .git
  if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi
}
RPMA_GIT=$(gitdir_of "$1")
FIO_GIT=$(gitdir_of "$2")
BUILD_DIR=$(cd "${3:-$repo/build}" 2>/dev/null && pwd) || { echo "no build dir ${3:-$repo/build}" >&2; exit 2; }
RPMA_TAG=${RPMA_TAG:-1.2.0}
FIO_TAG=${FIO_TAG:-fio-3.33}
RPMA_INC=$repo/compat/rpma/include
CACHE=${REMORA_UPSTREAM_CACHE:-${TMPDIR:-/tmp}/remora-upstream-cache}
PORT=${CHECK_PORT:-7304}
ONLY=${CHECK_ONLY:-}
JOBS=${CHECK_JOBS:-2}
ADDR=127.0.0.1

log() { echo "# $*"; }

# ---------------------------------------------------------------- packages
# What building the examples and fio needs, from Debian packages (apt-get
# update first, install only what is missing).
need_pkgs=(build-essential cmake pkg-config git libibverbs-dev librdmacm-dev
           libpmem-dev libprotobuf-c-dev iproute2)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  { $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >/dev/null 2>&1 || log "apt-get failed; continuing with what is installed"
fi

# ---------------------------------------------------------------- our library
OUR_SO=""
for cand in "$BUILD_DIR/lib/librpma.so.0" $(find "$BUILD_DIR" -name librpma.so.0 2>/dev/null | sort); do
  [ -e "$cand" ] && { OUR_SO=$(readlink -f "$cand"); break; }
done
if [ -z "$OUR_SO" ]; then
  echo "no librpma.so.0 under $BUILD_DIR (build the target rpma first)" >&2
  exit 2
fi
OUR_LIBDIR=$(dirname "$OUR_SO")
[ -f "$RPMA_INC/librpma.h" ] || { echo "no $RPMA_INC/librpma.h" >&2; exit 2; }
log "library: $OUR_SO (ldd must resolve librpma.so.0 to it)"
log "header:  $RPMA_INC/librpma.h"

rpma_commit=$(git --git-dir="$RPMA_GIT" rev-parse --verify -q "$RPMA_TAG^{commit}") ||
  { echo "no tag $RPMA_TAG in $RPMA_GIT" >&2; exit 2; }
fio_commit=$(git --git-dir="$FIO_GIT" rev-parse --verify -q "$FIO_TAG^{commit}") ||
  { echo "no tag $FIO_TAG in $FIO_GIT" >&2; exit 2; }
hdr_key=$(sha256sum "$RPMA_INC/librpma.h" | cut -c1-12)
log "librpma $RPMA_TAG = ${rpma_commit:0:12}, fio $FIO_TAG = ${fio_commit:0:12}, librpma.h ${hdr_key}"

mkdir -p "$CACHE"
# What the programs link with: a directory holding only the development
# symlink librpma.so -> our librpma.so.0, and a pkg-config file naming our
# header and that directory (pkg-config reads $PKG_CONFIG_PATH before the
# system's librpma.pc, Debian's librpma-dev may well be installed).
LINKDIR=$CACHE/link-$(echo "$OUR_SO" | sha256sum | cut -c1-8)
mkdir -p "$LINKDIR/lib" "$LINKDIR/pkgconfig" "$LINKDIR/nopmem2"
ln -sfn "$OUR_SO" "$LINKDIR/lib/librpma.so"
cat > "$LINKDIR/pkgconfig/librpma.pc" <<EOF
includedir=$RPMA_INC
libdir=$LINKDIR/lib

Name: librpma
Description: librpma 1.2.0 API on Remora
Version: 1.2.0
Requires.private: libibverbs
Cflags: -I\${includedir}
Libs: -L\${libdir} -lrpma
EOF
# fio's configure picks libpmem2 when its header compiles; its GPSPM server
# then crashes in pmem2_get_persist_fn(NULL) (a fio 3.33 bug). This header,
# first in fio's include path, makes that probe fail: fio is built on libpmem.
echo '#error "libpmem2 hidden from fio on purpose: build it on libpmem"' > "$LINKDIR/nopmem2/libpmem2.h"

# ---------------------------------------------------------------- bookkeeping
RUN=$(mktemp -d "${TMPDIR:-/tmp}/check-rpma.XXXXXX")
pids=()
cleanup() {
  # only our background jobs not yet reaped (a reaped pid may be reused)
  local p live
  live=" $(jobs -p | tr '\n' ' ') "
  for p in "${pids[@]}"; do [[ $live == *" $p "* ]] && kill "$p" 2>/dev/null; done
  sleep 0.2
  live=" $(jobs -p | tr '\n' ' ') "
  for p in "${pids[@]}"; do [[ $live == *" $p "* ]] && kill -9 "$p" 2>/dev/null; done
  if [ "${CHECK_KEEP:-0}" = 1 ]; then log "logs kept in $RUN"; else rm -rf "$RUN"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

npass=0; nfail=0
pass() { echo "PASS $1"; npass=$((npass + 1)); }
fail() {  # fail CASE REASON [LOG...]
  local c=$1 why=$2; shift 2
  echo "FAIL $c: $why"
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "    --- $(basename "$f") (last lines)"
    tail -n 12 "$f" | sed 's/^/    /'
  done
  nfail=$((nfail + 1))
}
selected() { [ -z "$ONLY" ] || [[ $1 =~ $ONLY ]]; }

# our_lib_loaded BIN: ldd resolves librpma.so.0 to our file
our_lib_loaded() {
  local got
  got=$(LD_LIBRARY_PATH=$OUR_LIBDIR ldd "$1" 2>/dev/null | awk '$1 == "librpma.so.0" { print $3 }')
  [ -n "$got" ] && [ "$(readlink -f "$got")" = "$OUR_SO" ]
}

# wait_listen PORT PID: until something listens on PORT (or PID died), <= 5 s
wait_listen() {
  local i
  for i in $(seq 50); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# wait_pid PID: exit status of a background job we started
wait_pid() { wait "$1"; }

# next_port: the next port nothing listens on
next_port() {
  PORT=$((PORT + 1))
  while ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q .; do PORT=$((PORT + 1)); done
}

run_env=(env LD_LIBRARY_PATH="$OUR_LIBDIR" PMEM_IS_PMEM_FORCE=1)

# ================================================================ examples
EX_KEY=rpma-${rpma_commit:0:12}-h${hdr_key}
EX_DIR=$CACHE/$EX_KEY
examples=(01-connection 02-read-to-volatile 03-read-to-persistent 04-write-to-persistent
          05-flush-to-persistent 06-multiple-connections 06scch-multiple-connections
          07-atomic-write 08-messages-ping-pong 08srq-simple-messages-ping-pong-with-srq
          09-flush-to-persistent-GPSPM 09scch-flush-to-persistent-GPSPM 10-send-with-imm
          11-write-with-imm 12-receive-completion-queue 12scch-receive-completion-queue
          13-messages-ping-pong-with-srq)

build_example() {  # build_example NAME -> 0 if server and client exist
  local ex=$1 b=$EX_DIR/build/$1
  [ -f "$b/.ok" ] && return 0
  rm -rf "$b"; mkdir -p "$b"
  # -I first in CMAKE_C_FLAGS: some example CMakeLists add no include dir of
  # librpma's at all (LIBRPMA_INCLUDE_DIR unset), which would give
  # /usr/include/librpma.h. The depfiles are checked below.
  if ! PKG_CONFIG_PATH=$LINKDIR/pkgconfig cmake -S "$EX_DIR/src/examples/$ex" -B "$b" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-I$RPMA_INC" >"$b/build.log" 2>&1 ||
     ! cmake --build "$b" -j"$JOBS" >>"$b/build.log" 2>&1; then
    return 1
  fi
  [ -x "$b/server" ] && [ -x "$b/client" ] || return 1
  # every object including librpma.h included ours
  local bad
  bad=$(grep -rh --include='*.d' 'librpma\.h' "$b" | tr ' \\' '\n\n' | grep 'librpma\.h$' | sort -u |
        grep -vx "$RPMA_INC/librpma.h")
  if [ -n "$bad" ]; then echo "compiled with another librpma.h: $bad" >>"$b/build.log"; return 1; fi
  grep -rqh --include='*.d' "$RPMA_INC/librpma.h" "$b" || { echo "no depfile names our librpma.h" >>"$b/build.log"; return 1; }
  touch "$b/.ok"
}

if [ ! -f "$EX_DIR/src/.ok" ]; then
  rm -rf "$EX_DIR/src"; mkdir -p "$EX_DIR/src"
  git --git-dir="$RPMA_GIT" archive "$rpma_commit" | tar -x -C "$EX_DIR/src" && touch "$EX_DIR/src/.ok"
fi
log "librpma $RPMA_TAG examples: $EX_DIR/build (built once, then cached)"
declare -A ex_built
for ex in "${examples[@]}"; do
  if build_example "$ex"; then ex_built[$ex]=1; else ex_built[$ex]=0; fi
done

# run_pair CASE EXAMPLE SERVER_TIMEOUT "SERVER_ARGS" "CLIENT_ARGS" ["CLIENT_ARGS" ...]
# Clients named with a leading '&' run in parallel with the next ones.
# PASS if the server and every client exit 0 within their time limits.
run_pair() {
  local c=$1 ex=$2 st=$3 sargs=$4; shift 4
  selected "$c" || return 0
  local b=$EX_DIR/build/$ex d=$RUN/$c
  mkdir -p "$d"
  if [ "${ex_built[$ex]}" != 1 ]; then fail "$c" "build of $ex failed" "$b/build.log"; return; fi
  local bin
  for bin in server client; do
    our_lib_loaded "$b/$bin" || { fail "$c" "ldd: $bin does not load $OUR_SO"; return; }
  done
  next_port
  local sargv=${sargs//@PORT@/$PORT}
  # shellcheck disable=SC2086
  "${run_env[@]}" timeout -k 2 "$st" "$b/server" $ADDR $PORT $sargv >"$d/server.log" 2>&1 &
  local spid=$!; pids+=("$spid")
  if ! wait_listen "$PORT" "$spid"; then
    wait_pid "$spid"; fail "$c" "server did not listen on $PORT (exit $?)" "$d/server.log"; return
  fi
  local i=0 cpids=() cargs why=""
  for cargs in "$@"; do
    i=$((i + 1))
    local bg=0
    [[ $cargs == '&'* ]] && { bg=1; cargs=${cargs#&}; }
    # shellcheck disable=SC2086
    "${run_env[@]}" timeout -k 2 20 "$b/client" $ADDR $PORT $cargs >"$d/client$i.log" 2>&1 &
    local cp=$!; pids+=("$cp")
    if [ $bg = 1 ]; then cpids+=("$cp:$i"); continue; fi
    wait_pid "$cp"; local rc=$?
    [ $rc = 0 ] || why="${why}client$i${cargs:+ ($cargs)} exit $rc; "
  done
  local e
  for e in "${cpids[@]}"; do
    wait_pid "${e%%:*}"; local rc=$?
    [ $rc = 0 ] || why="${why}client${e##*:} exit $rc; "
  done
  wait_pid "$spid"; local src=$?
  [ $src = 0 ] || why="${why}server exit $src$([ $src = 124 ] && echo ' (timeout)'); "
  if [ -z "$why" ]; then pass "$c"; else fail "$c" "$why" "$d"/server.log "$d"/client*.log; fi
}

pmem_file() {  # pmem_file NAME -> path of a fresh 8 MiB file
  local f=$RUN/$1.pmem
  rm -f "$f"; truncate -s 8M "$f"; echo "$f"
}

# The cases follow librpma's examples/run-all-examples.sh (arguments, seeds,
# rounds), with every optional mode as its own case: DRAM, then a regular
# file as PMem (libpmem with PMEM_IS_PMEM_FORCE=1) for those taking one.
run_pair 01-connection 01-connection 10 "" ""
run_pair 02-read-to-volatile 02-read-to-volatile 10 "" ""
run_pair 03-read-to-persistent 03-read-to-persistent 10 "" ""
run_pair 03-read-to-persistent.file 03-read-to-persistent 10 "$(pmem_file 03s)" "$(pmem_file 03c) 0"
run_pair 04-write-to-persistent 04-write-to-persistent 10 "" ""
run_pair 04-write-to-persistent.file 04-write-to-persistent 10 "$(pmem_file 04s)" "$(pmem_file 04c) 0"
run_pair 05-flush-to-persistent 05-flush-to-persistent 10 "" ""
run_pair 05-flush-to-persistent.file 05-flush-to-persistent 10 "$(pmem_file 05s)" "$(pmem_file 05c) 0"
run_pair 05-flush-to-persistent.file.direct-pmem-write 05-flush-to-persistent 10 "$(pmem_file 05ds) on" "$(pmem_file 05dc) 0"
# 06: the server serves clients until it sees no event for 15 s, then exits 0
run_pair 06-multiple-connections 06-multiple-connections 30 "" 8 9 11 12
run_pair 06scch-multiple-connections 06scch-multiple-connections 30 "" 8 9 11 12
run_pair 07-atomic-write 07-atomic-write 10 "" "1st_word 2nd_word 3rd_word"
run_pair 07-atomic-write.file 07-atomic-write 10 "$(pmem_file 07s)" "1st_word 2nd_word 3rd_word"
run_pair 08-messages-ping-pong 08-messages-ping-pong 10 "" "7 3"
run_pair 08srq-simple-messages-ping-pong-with-srq 08srq-simple-messages-ping-pong-with-srq 10 "" "7 3"
run_pair 08srq-simple-messages-ping-pong-with-srq.m 08srq-simple-messages-ping-pong-with-srq 10 "m" "7 3"
run_pair 08srq-simple-messages-ping-pong-with-srq.r 08srq-simple-messages-ping-pong-with-srq 10 "r" "7 3"
run_pair 09-flush-to-persistent-GPSPM 09-flush-to-persistent-GPSPM 10 "" ""
run_pair 09-flush-to-persistent-GPSPM.file 09-flush-to-persistent-GPSPM 10 "$(pmem_file 09s)" "$(pmem_file 09c) 0"
run_pair 09scch-flush-to-persistent-GPSPM 09scch-flush-to-persistent-GPSPM 10 "" ""
run_pair 09scch-flush-to-persistent-GPSPM.file 09scch-flush-to-persistent-GPSPM 10 "$(pmem_file 09ss)" "$(pmem_file 09sc) 0"
run_pair 10-send-with-imm 10-send-with-imm 10 "" "1234 1st_word"
run_pair 11-write-with-imm 11-write-with-imm 10 "" "1234"
run_pair 12-receive-completion-queue 12-receive-completion-queue 10 "" "7 3"
run_pair 12scch-receive-completion-queue 12scch-receive-completion-queue 10 "" "7 3"
# 13: three clients at once on one shared RQ; the server stops 3 s after the last request
run_pair 13-messages-ping-pong-with-srq 13-messages-ping-pong-with-srq 20 "3" "&1 3" "&5 3" "&10 3"

# ================================================================ fio
FIO_KEY=fio-${fio_commit:0:12}-h${hdr_key}
FIO_DIR=$CACHE/$FIO_KEY
FIO=$FIO_DIR/src/fio
fio_ok=0
fio_why=""
if [ -f "$FIO_DIR/.ok" ]; then
  fio_ok=1
else
  log "building fio $FIO_TAG with the librpma engines in $FIO_DIR/src"
  rm -rf "$FIO_DIR"; mkdir -p "$FIO_DIR/src"
  if ! git --git-dir="$FIO_GIT" archive "$fio_commit" | tar -x -C "$FIO_DIR/src"; then
    fio_why="git archive failed"
  elif ! (cd "$FIO_DIR/src" &&
          CFLAGS="-I$LINKDIR/nopmem2 -I$RPMA_INC" LDFLAGS="-L$LINKDIR/lib" \
            ./configure --disable-native >"$FIO_DIR/build.log" 2>&1); then
    fio_why="configure failed"
  elif ! grep -q 'CONFIG_LIBRPMA_APM' "$FIO_DIR/src/config-host.h" ||
       ! grep -q 'CONFIG_LIBRPMA_GPSPM' "$FIO_DIR/src/config-host.h"; then
    fio_why="configure did not enable the librpma engines (see config.log)"
  elif grep -q 'CONFIG_LIBPMEM2_INSTALLED' "$FIO_DIR/src/config-host.h"; then
    fio_why="configure chose libpmem2"
  elif ! make -C "$FIO_DIR/src" -j"$JOBS" fio >>"$FIO_DIR/build.log" 2>&1; then
    fio_why="make failed"
  else
    fio_ok=1
    touch "$FIO_DIR/.ok"
  fi
fi
if [ $fio_ok = 1 ]; then
  # fio's makefile writes depfiles (*.d): the engines must have seen our header
  bad=$(cat "$FIO_DIR"/src/engines/librpma_*.d 2>/dev/null | tr ' \\' '\n\n' | grep 'librpma\.h$' | sort -u |
        grep -vx "$RPMA_INC/librpma.h")
  if [ -n "$bad" ]; then fio_ok=0; fio_why="engines compiled with another librpma.h: $bad"; fi
  grep -qs "$RPMA_INC/librpma.h" "$FIO_DIR"/src/engines/librpma_apm.d "$FIO_DIR"/src/engines/librpma_gpspm.d ||
    { fio_ok=0; fio_why="the engines' depfiles do not name our librpma.h"; }
  if ! our_lib_loaded "$FIO"; then fio_ok=0; fio_why="ldd: fio does not load $OUR_SO"; fi
fi

# fio_case NAME ENGINE RW MEM: MEM = malloc | file
# The server job: one connection, a 1 MiB workspace in DRAM (filename=malloc)
# or in a regular file (PMem by PMEM_IS_PMEM_FORCE=1); the client: 4 KiB
# blocks, iodepth 2, for 2 s. APM on PMem needs direct_write_to_pmem=1 (its
# client refuses a server without it; its writes then end with PERSISTENT
# flushes); GPSPM persists on the server, direct_write_to_pmem=0.
# Both run in the case's directory (fio creates a file named as filename=).
# fio exits 0 even when a job fails, so both sides are judged by their
# output: "err= 0" in every job's summary and no error reported by an engine.
fio_case() {
  local c=$1 eng=$2 rw=$3 mem=$4
  selected "$c" || return 0
  local d=$RUN/$c
  mkdir -p "$d"
  if [ $fio_ok != 1 ]; then fail "$c" "fio: $fio_why" "$FIO_DIR/build.log"; return; fi
  next_port
  local fname=malloc
  if [ "$mem" = file ]; then fname=$d/server.pmem; truncate -s 8M "$fname"; fi
  local server_extra="" dw=0
  [ "$eng" = apm ] && [ "$mem" = file ] && dw=1
  [ "$eng" = gpspm ] && server_extra=$'busy_wait_polling=1\niodepth=2\ntime_based\nruntime=365d'
  cat >"$d/server.fio" <<EOF
[global]
ioengine=librpma_${eng}_server
create_serialize=0
kb_base=1000
serverip=$ADDR
port=$PORT
thread

[server]
direct_write_to_pmem=$dw
numjobs=1
size=1MiB
filename=$fname
$server_extra
EOF
  cat >"$d/client.fio" <<EOF
[global]
ioengine=librpma_${eng}_client
create_serialize=0
serverip=$ADDR
port=$PORT
thread

[client]
numjobs=1
group_reporting=1
sync=1
iodepth=2
iodepth_batch_submit=1
rw=$rw
blocksize=4k
time_based
runtime=2s
EOF
  (cd "$d" && exec "${run_env[@]}" timeout -k 2 30 "$FIO" server.fio) >"$d/server.log" 2>&1 &
  local spid=$!; pids+=("$spid")
  if ! wait_listen "$PORT" "$spid"; then
    wait_pid "$spid"; fail "$c" "fio server did not listen on $PORT (exit $?)" "$d/server.log"; return
  fi
  (cd "$d" && exec "${run_env[@]}" timeout -k 2 30 "$FIO" client.fio) >"$d/client.log" 2>&1 &
  local cpid=$!; pids+=("$cpid")
  wait_pid "$cpid"; local crc=$?
  wait_pid "$spid"; local src=$?
  local why=""
  [ $crc = 0 ] || why="${why}client exit $crc; "
  [ $src = 0 ] || why="${why}server exit $src$([ $src = 124 ] && echo ' (timeout)'); "
  local side
  for side in server client; do
    local f=$d/$side.log
    grep -q 'err= 0' "$f" || why="${why}$side: no 'err= 0' job summary; "
    grep -Eq 'err= *[1-9-]' "$f" && why="${why}$side: a job reported an error; "
    # error lines of fio and of its engines; the engines' informational
    # lines (mapped file, libpmem used, rpma_mr_advise note) are not errors
    grep -Ev '^fio: (size of memory mapped from the file|library used to map PMem)|^Note: having rpma_mr_advise' "$f" |
      grep -Eqi 'fio: |failed|too big|unexp|unsupported|cannot|error=|segmentation|assertion|core dumped|aborted' &&
      why="${why}$side: error messages; "
  done
  # the client moved data: its summary has a non-zero io= for the direction
  grep -Eq '(READ|WRITE): bw=.* io=[1-9]' "$d/client.log" || why="${why}client: no I/O in the summary; "
  if [ -z "$why" ]; then pass "$c"; else fail "$c" "$why" "$d/server.log" "$d/client.log"; fi
}

for mem in malloc file; do
  for rw in write read randwrite; do fio_case "fio.apm.$mem.$rw" apm "$rw" "$mem"; done
  for rw in write randwrite; do fio_case "fio.gpspm.$mem.$rw" gpspm "$rw" "$mem"; done
done

echo "$npass passed, $nfail failed"
[ $nfail = 0 ]
