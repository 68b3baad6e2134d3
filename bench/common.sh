# shellcheck shell=bash
# bench/common.sh: helpers the benchmark scripts share (compare.sh,
# samehost.sh, samehost-rounds.sh, fio-latency.sh, fio-bandwidth.sh, ab-perf.sh). Sourced, never run; needs python3.

# A TCP port on 127.0.0.1 that nobody uses now.
free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# True once something listens on 127.0.0.1:$1 (or the wildcard address).
listening() {
    python3 - "$1" <<'EOF'
import sys
port = int(sys.argv[1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        lines = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            sys.exit(0)
sys.exit(1)
EOF
}

# The scripts that run servers set PIDS=() (what their exit trap kills),
# SERVER_TIMEOUT and, per server, PORT.
# bounded SECONDS COMMAND...: runs COMMAND bounded by timeout, in the background so
# that a signal to the script ends it at once (its trap kills what PIDS lists).
bounded() {
    local limit=$1 rc=0
    shift
    timeout "$limit" "$@" &
    PIDS+=($!)
    wait $! || rc=$?
    return $rc
}

# start_server LOG COMMAND...: starts a server (bounded by SERVER_TIMEOUT) and
# waits (10 s at most) until it listens on $PORT; sets SERVER_PID and adds it to
# PIDS. False when it left or did not listen in time.
start_server() {
    local log=$1 i
    shift
    timeout "$SERVER_TIMEOUT" "$@" </dev/null >"$log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for ((i = 0; i < 100; i++)); do
        listening "$PORT" && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# stop_server: waits (10 s at most) for the server to leave, then kills it.
stop_server() {
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
}

# kill_started_on_exit: on exit (and on INT, TERM) kills every process PIDS
# lists that still runs, waits for it, and removes $WORK.
kill_started_on_exit() {
    trap cleanup_started EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
cleanup_started() {
    local pid
    for pid in ${PIDS[@]+"${PIDS[@]}"}; do
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$WORK"
}

# samehost_tools: the same-host scripts' programs. Makes BUILD absolute (from
# ROOT), sets SAMEHOST and PERF (remora-bench-samehost, remora-perf) in it,
# and checks them, python3 and timeout; says what is missing on stderr and
# returns 1.
samehost_tools() {
    local tool
    [[ "$BUILD" = /* ]] || BUILD=$ROOT/$BUILD
    SAMEHOST=$BUILD/bin/remora-bench-samehost
    PERF=$BUILD/bin/remora-perf
    for tool in "$SAMEHOST" "$PERF"; do
        [[ -x "$tool" ]] || {
            echo "$(basename "$0"): $tool not found or not executable: build it first" \
                "(cmake --build $BUILD --target $(basename "$tool")), or pass --build DIR" >&2
            return 1
        }
    done
    command -v python3 >/dev/null || { echo "$(basename "$0"): python3 is required" >&2; return 1; }
    command -v timeout >/dev/null || { echo "$(basename "$0"): timeout (coreutils) is required" >&2; return 1; }
}

# cpu_wrap OUT COMMAND...: runs COMMAND and writes to OUT the user and sys
# CPU seconds it and its descendants used (getrusage RUSAGE_CHILDREN, which
# counts timeout's child once both are waited for). SIGTERM and SIGINT are
# passed on to COMMAND. Use as: python3 -c "$CPU_WRAP" OUT COMMAND...
# shellcheck disable=SC2034 # used by the scripts that source this file
CPU_WRAP='import resource, signal, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, _f: p.send_signal(s))
rc = p.wait()
u = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    f.write(f"{u.ru_utime:.6f} {u.ru_stime:.6f}\n")
sys.exit(rc if rc >= 0 else 128 - rc)'

# fio_checked FIO LIB: prints the fio binary to run, FIO or, when FIO is
# empty, the newest one compat/check-upstream.sh built from the fio mirror
# (its cache, ${REMORA_UPSTREAM_CACHE:-${TMPDIR:-/tmp}/remora-upstream-cache}),
# once it is executable and LIB holds Remora's librpma.so.0; otherwise says
# why on stderr and returns 1. Use as: FIO=$(fio_checked "$FIO" "$LIB") || exit 2
fio_checked() {
    local fio=$1 lib=$2 me cache
    me=$(basename "$0")
    cache=${REMORA_UPSTREAM_CACHE:-${TMPDIR:-/tmp}/remora-upstream-cache}
    if [[ -z "$fio" ]]; then
        # shellcheck disable=SC2012 # the cache's names are ours: fio-<commit>-h<key>
        fio=$(ls -t "$cache"/fio-*/src/fio 2>/dev/null | head -1 || true)
        [[ -n "$fio" ]] || {
            echo "$me: no fio built in $cache: run compat/check-upstream.sh first, or pass --fio" >&2
            return 1
        }
    fi
    [[ -x "$fio" ]] || { echo "$me: --fio: '$fio' is not executable" >&2; return 1; }
    [[ -e "$lib/librpma.so.0" ]] || { echo "$me: --lib: no librpma.so.0 in '$lib'" >&2; return 1; }
    echo "$fio"
}
