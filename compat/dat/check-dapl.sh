#!/usr/bin/env bash
# compat/dat/check-dapl.sh - run OFED compat-dapl 1.2's own test programs,
# unchanged, against Remora's dat/ headers and libdat.so.1 on 127.0.0.1.
#
#   compat/dat/check-dapl.sh MIRROR_GIT_DIR [REF]
#
# MIRROR_GIT_DIR is a git directory of compat-dapl (for example the one
# `fetch github:eurolinux-enterprise-linux-sources/compat-dapl` gives); REF
# defaults to origin/el7. Its src/test and src/dat/include are extracted into
# a temporary directory (never into this repository) and deleted afterwards.
# dtest and dapltest are built with our include directory and -L our build's
# lib directory (BUILD_DIR, default <repo>/build; build it first), `ldd`
# must show our libdat.so.1, and each case prints "PASS <case>" or
# "FAIL <case>"; the last line is "N passed, M failed". The exit status is 0
# when every case passed. dtest is also built against compat-dapl's own
# headers and run on our library (binary compatibility).
#
# Environment: BUILD_DIR, IA (default ofi-tcp-lo), CC (default cc),
# KEEP=1 keeps the temporary directory (its logs) and prints its path.
set -u -o pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 MIRROR_GIT_DIR [REF]" >&2
    exit 2
fi
MIRROR=$1
REF=${2:-origin/el7}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$REPO/build}
LIBDIR=$(cd "$BUILD_DIR/lib" 2>/dev/null && pwd) || { echo "no $BUILD_DIR/lib: build the project first" >&2; exit 2; }
OURLIB=$(readlink -f "$LIBDIR/libdat.so.1")
[ -f "$OURLIB" ] || { echo "no $LIBDIR/libdat.so.1: build target dat first" >&2; exit 2; }
INC=$HERE/include
IA=${IA:-ofi-tcp-lo}
CC=${CC:-cc}
HOST=127.0.0.1

WORK=$(mktemp -d /tmp/check-dapl.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    if [ "${KEEP:-0}" = 1 ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASSED=0
FAILED=0
result() {  # result <case> <0|1>
    if [ "$2" = 0 ]; then echo "PASS $1"; PASSED=$((PASSED + 1)); else echo "FAIL $1"; FAILED=$((FAILED + 1)); fi
}

# ---------------------------------------------------------------- sources
if ! git --git-dir="$MIRROR" archive --format=tar "$REF" src/test src/dat/include 2>"$WORK/archive.err" |
        tar -x -C "$WORK"; then
    echo "cannot extract $REF from $MIRROR:" >&2
    cat "$WORK/archive.err" >&2
    exit 2
fi
SRC=$WORK/src
echo "compat-dapl $(git --git-dir="$MIRROR" rev-parse --short "$REF") ($REF); library $OURLIB; IA $IA"

# ---------------------------------------------------------------- build
LINK=(-L"$LIBDIR" "-Wl,-rpath,$LIBDIR" -ldat -lpthread)
build() {  # build <case> <output> <compiler args...>
    local name=$1 out=$2
    shift 2
    if "$CC" -g -O2 -D_GNU_SOURCE -w "$@" -o "$out" "${LINK[@]}" >"$WORK/$name.build.log" 2>&1; then
        result "$name" 0
        return 0
    fi
    tail -20 "$WORK/$name.build.log"
    result "$name" 1
    return 1
}
uses_our_lib() {  # uses_our_lib <binary>
    local got
    got=$(ldd "$1" | awk '$1 == "libdat.so.1" { print $3 }')
    [ -n "$got" ] && [ "$(readlink -f "$got")" = "$OURLIB" ]
}

DTD=$SRC/test/dapltest
DT_SOURCES=$(sed -n '/dapltest1_SOURCES/,/^\s*$/p' "$DTD/Makefile.am" | grep -o '[A-Za-z0-9_/]*\.c' | sed "s|^|$DTD/|")
have_dtest=0 have_dtest_ref=0 have_dapltest=0
build build-dtest "$WORK/dtest" -I"$INC" "$SRC/test/dtest/dtest.c" && have_dtest=1
build build-dtest-refheaders "$WORK/dtest-ref" -I"$SRC/dat/include" "$SRC/test/dtest/dtest.c" && have_dtest_ref=1
# shellcheck disable=SC2086 # one word per source file
build build-dapltest "$WORK/dapltest" -I"$DTD/include" -I"$DTD/mdep/linux" -I"$INC" $DT_SOURCES && have_dapltest=1
for b in dtest dtest-ref dapltest; do
    [ -x "$WORK/$b" ] || continue
    uses_our_lib "$WORK/$b"
    result "ldd-$b" $?
done

# ---------------------------------------------------------------- runs
ERRORS='error|problem|mismatch|fail|unexpected|bad |wrong|segmentation|abort'

# dtest: server and client, each must finish with its timing summary.
run_dtest() {  # run_dtest <case> <binary> [extra flags]
    local name=$1 bin=$2
    shift 2
    local log=$WORK/$name
    timeout 60 "$bin" -s -P "$IA" "$@" >"$log.server" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    sleep 1
    timeout 60 "$bin" -h "$HOST" -P "$IA" "$@" >"$log.client" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    local ok=1
    if [ $crc = 0 ] && [ $src = 0 ] && grep -q 'TOTAL:' "$log.client" && grep -q 'TOTAL:' "$log.server" &&
        ! grep -qiE "$ERRORS" "$log.client" "$log.server"; then
        ok=0
    fi
    [ $ok = 0 ] || { echo "  --- $name (client rc $crc, server rc $src)"; grep -iE "$ERRORS" "$log.client" "$log.server" | head -5; }
    result "$name" $ok
}
if [ $have_dtest = 1 ]; then
    run_dtest dtest "$WORK/dtest"
    # -p polls with dat_evd_dequeue until it stops returning the bare
    # DAT_QUEUE_EMPTY, which compat-dapl (and this library) return for DTO EVDs.
    run_dtest dtest-polling "$WORK/dtest" -p
fi
[ $have_dtest_ref = 1 ] && run_dtest dtest-refheaders "$WORK/dtest-ref"

if [ $have_dapltest = 1 ]; then
    DT=$WORK/dapltest
    SLOG=$WORK/dapltest.server
    start_server() {
        timeout 900 "$DT" -T S -D "$IA" >>"$SLOG" 2>&1 &
        SERVER=$!
        PIDS+=("$SERVER")
        sleep 1
    }
    # A client case: the client must reach "End of Work" with its report
    # (stats for -T T, the raw line for -T P) and neither side may print an
    # error while it runs.
    run_client() {  # run_client <case> <pattern the output needs> <dapltest args...>
        local name=$1 need=$2
        shift 2
        local log=$WORK/$name.client before
        before=$(wc -l <"$SLOG")
        timeout 120 "$DT" "$@" >"$log" 2>&1
        local rc=$?
        local ok=1
        if [ $rc = 0 ] && grep -q 'End of Work' "$log" && grep -q -- "$need" "$log" &&
            ! grep -qiE "$ERRORS" "$log" && ! tail -n +"$((before + 1))" "$SLOG" | grep -qiE "$ERRORS"; then
            ok=0
        fi
        [ $ok = 0 ] || { echo "  --- $name (rc $rc)"; { grep -iE "$ERRORS" "$log"; tail -n +"$((before + 1))" "$SLOG" | grep -iE "$ERRORS"; } | head -5; }
        result "$name" $ok
    }
    C=(-s "$HOST" -D "$IA")
    : >"$SLOG"
    start_server
    run_client T-SR '----- Stats' -T T "${C[@]}" -i 1000 client SR 4096 server SR 4096
    run_client T-SR-validate-2seg '----- Stats' -T T "${C[@]}" -i 500 -V client SR 4096 2 server SR 4096 2
    run_client T-RR-validate '----- Stats' -T T "${C[@]}" -i 500 -V client RR 4096 server RR 8192 2
    run_client T-RW-validate '----- Stats' -T T "${C[@]}" -i 500 -V client RW 4096 server RW 8192 2
    run_client T-SR-reap-f '----- Stats' -T T "${C[@]}" -i 500 client SR 1024 3 -f server SR 2048 1 -f
    run_client T-mixed-2threads-4eps-validate '----- Stats' -T T "${C[@]}" -i 200 -V -t 2 -w 4 \
        client RW 4096 1 server RW 2048 4 client SR 1024 4 server SR 4096 2 client SR 1024 3 -f server SR 2048 1 -f
    run_client T-polling-validate '----- Stats' -T T "${C[@]}" -i 500 -V -P client SR 4096 server RW 4096
    for k in 1 2 3 4 5; do
        run_client "T-w4-SR-run$k" '----- Stats' -T T "${C[@]}" -i 1000 -w 4 \
            client SR 4096 server SR 4096 server SR 4096
    done
    run_client P-RW-blocking 'raw:' -T P "${C[@]}" -i 2000 RW 4096
    run_client P-RR-blocking 'raw:' -T P "${C[@]}" -i 2000 RR 4096
    run_client P-RW-polling 'raw:' -T P "${C[@]}" -i 2000 -m p RW 65536 2
    run_client P-RR-polling 'raw:' -T P "${C[@]}" -i 2000 -m p RR 65536 2
    # -T Q: the server cleans up and exits.
    timeout 60 "$DT" -T Q "${C[@]}" >"$WORK/Q.client" 2>&1
    qrc=$?
    timeout 30 tail --pid="$SERVER" -f /dev/null
    srv_alive=$(kill -0 "$SERVER" 2>/dev/null && echo 1 || echo 0)
    [ $qrc = 0 ] && [ "$srv_alive" = 0 ] && grep -q 'End of Work' "$WORK/Q.client"
    result Q-quit-server $?

    # -T L: no server.
    timeout 300 "$DT" -T L -D "$IA" -w 8 -m 100 >"$WORK/L.log" 2>&1
    lrc=$?
    lok=1
    if [ $lrc = 0 ] && ! grep -qE 'error occurs|can not continue' "$WORK/L.log"; then
        lok=0
        for t in limit_ia limit_pz limit_cno limit_evd limit_ep limit_rsp limit_psp limit_lmr limit_rpost limit_size_lmr; do
            grep -q "$t" "$WORK/L.log" || lok=1
        done
        for o in 'IAs opened: 100' 'PZs created: 100' 'CNOs created: 100' 'EVDs created: 100' 'EPs created: 100' \
                 'RSPs created: 100' 'PSPs created: 100' 'LMRs created: 100' 'recv buffers posted per EP' 'LMR of'; do
            grep -q "$o" "$WORK/L.log" || lok=1
        done
    fi
    result L-limits-w8-m100 $lok

    # -T F: the FFT features run in the client alone (they need no server
    # process; queryinfo creates a PSP on the dapltest server's own
    # qualifier, which a server on the same host would hold).
    for f in hwconn endpoint pz mem connmgt queryinfo; do
        timeout 120 "$DT" -T F "${C[@]}" -f "$f" >"$WORK/F-$f.log" 2>&1
        frc=$?
        npass=$(grep -c 'Result: PASS' "$WORK/F-$f.log")
        nfail=$(grep -c 'Result: FAIL' "$WORK/F-$f.log")
        if [ $frc = 0 ] && [ "$npass" -gt 0 ] && [ "$nfail" = 0 ]; then
            result "F-$f ($npass cases)" 0
        else
            echo "  --- F-$f: $npass passed, $nfail failed"
            grep -B3 'Result: FAIL' "$WORK/F-$f.log" | grep -vE '^\s*$|\*\*\*' | head -8
            result "F-$f" 1
        fi
    done
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
