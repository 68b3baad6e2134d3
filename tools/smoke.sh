#!/usr/bin/env bash
# Smoke test of the Remora tools on 127.0.0.1: remora-info, then a short
# remora-perf server/client pair for every operation, plus two failure cases
# that must end quickly with an error. Exits non-zero on any failure.
#
#   tools/smoke.sh [BIN_DIR]
#
#   BIN_DIR    where remora-info and remora-perf are (default: $REMORA_BIN_DIR,
#              else build/bin next to this script's directory)
#   PROVIDER   libfabric provider (default tcp)
#
# Needs bash and coreutils (timeout). Every process it starts is bounded by a
# timeout, and servers still running at exit are killed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${1:-${REMORA_BIN_DIR:-$ROOT/build/bin}}
PROVIDER=${PROVIDER:-tcp}
INFO=$BIN_DIR/remora-info
PERF=$BIN_DIR/remora-perf
CLIENT_TIMEOUT=60
SERVER_TIMEOUT=90
export REMORA_PERF_WATCHDOG_S=80  # the tools' own watchdog, inside the timeouts

for tool in "$INFO" "$PERF"; do
    if [[ ! -x "$tool" ]]; then
        echo "smoke.sh: $tool not found or not executable (build first, or pass BIN_DIR)" >&2
        exit 2
    fi
done
command -v timeout >/dev/null || { echo "smoke.sh: timeout (coreutils) is required" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/remora-smoke.XXXXXX")
SERVER_PID=""
cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

FAILURES=0
fail() {
    echo "smoke.sh: FAIL: $*" >&2
    FAILURES=$((FAILURES + 1))
}
pass() { echo "smoke.sh: ok: $*"; }

# ---- remora-info -------------------------------------------------------------
if timeout 30 "$INFO" --provider "$PROVIDER" >"$WORK/info.txt" 2>&1 &&
    grep -q "127.0.0.1" "$WORK/info.txt"; then
    pass "remora-info lists $PROVIDER on 127.0.0.1"
else
    fail "remora-info --provider $PROVIDER"; cat "$WORK/info.txt" >&2
fi
if timeout 30 "$INFO" --provider "$PROVIDER" --json >"$WORK/info.json" 2>&1 &&
    head -c1 "$WORK/info.json" | grep -q '\[' && grep -q '"address":"127.0.0.1"' "$WORK/info.json" &&
    grep -q '"atomic_write":true' "$WORK/info.json"; then
    pass "remora-info --json"
else
    fail "remora-info --json"; cat "$WORK/info.json" >&2
fi
if timeout 30 "$INFO" --provider no-such-provider >/dev/null 2>&1; then
    fail "remora-info with an unknown provider exited 0"
else
    pass "remora-info with an unknown provider fails"
fi

# ---- remora-perf -------------------------------------------------------------

# start_server LOG [FLAGS...]: starts a server on a free port; sets PORT.
start_server() {
    local log=$1 i
    shift
    : >"$log"
    timeout "$SERVER_TIMEOUT" "$PERF" --server --port 0 --address 127.0.0.1 --provider "$PROVIDER" "$@" \
        </dev/null >"$log" 2>&1 &
    SERVER_PID=$!
    PORT=""
    for ((i = 0; i < 100; i++)); do
        PORT=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$log" | head -n1)
        [[ -n "$PORT" ]] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

# stop_server: waits (10 s at most) for the server to leave by itself;
# returns its exit status, or 124 if it had to be killed.
stop_server() {
    local i rc
    for ((i = 0; i < 100; i++)); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=""
        return 124
    fi
    wait "$SERVER_PID"
    rc=$?
    SERVER_PID=""
    return $rc
}

# check_json FILE OP SIZES ITERS: one well-formed line per size, in order.
check_json() {
    local file=$1 op=$2 sizes=$3 iters=$4 size n=0 line key
    local -a lines
    mapfile -t lines < <(grep '^{' "$file")
    IFS=',' read -ra want <<<"$sizes"
    [[ ${#lines[@]} -eq ${#want[@]} ]] || { echo "expected ${#want[@]} JSON lines, got ${#lines[@]}"; return 1; }
    for size in "${want[@]}"; do
        line=${lines[$n]}
        n=$((n + 1))
        for key in op size iters qd gbps mops lat_p50_us lat_p99_us lat_p999_us engine; do
            [[ "$line" == *"\"$key\":"* ]] || { echo "missing key $key: $line"; return 1; }
        done
        [[ "$line" == *"\"op\":\"$op\""* && "$line" == *"\"size\":$size,"* && "$line" == *"\"iters\":$iters,"* &&
            "$line" == *'"engine":"remora"'* ]] || { echo "unexpected values: $line"; return 1; }
        # Something was measured: a non-zero median latency.
        [[ "$line" =~ \"lat_p50_us\":([0-9.]+) ]] && [[ "${BASH_REMATCH[1]}" != "0.000" ]] ||
            { echo "zero latency: $line"; return 1; }
    done
}

# run_pair NAME SERVER_FLAGS -- CLIENT ARGS...
run_pair() {
    local name=$1 sflags=$2
    shift 3
    local slog="$WORK/$name.server.log" out="$WORK/$name.out" err="$WORK/$name.err" op="" sizes="" iters="" a
    local -a args=("$@")
    for ((a = 0; a < ${#args[@]}; a++)); do
        case "${args[$a]}" in
            --op) op=${args[$((a + 1))]} ;;
            --size) sizes=${args[$((a + 1))]} ;;
            --iters) iters=${args[$((a + 1))]} ;;
        esac
    done
    # shellcheck disable=SC2086  # server flags are words on purpose
    if ! start_server "$slog" $sflags; then
        fail "$name: server did not start"; cat "$slog" >&2
        stop_server
        return
    fi
    local crc=0
    timeout "$CLIENT_TIMEOUT" "$PERF" --client 127.0.0.1 --port "$PORT" --provider "$PROVIDER" --json "$@" \
        </dev/null >"$out" 2>"$err" || crc=$?
    local src=0
    stop_server || src=$?
    local why=""
    if [[ $crc -ne 0 ]]; then
        why="client exit $crc"
    elif [[ $src -ne 0 ]]; then
        why="server exit $src (124: still running 10 s after its client left)"
    elif ! why=$(check_json "$out" "$op" "$sizes" "$iters"); then
        :
    else
        why=""
    fi
    if [[ -n "$why" ]]; then
        fail "$name: $why"
        echo "--- client stdout:" >&2; cat "$out" >&2
        echo "--- client stderr:" >&2; cat "$err" >&2
        echo "--- server log:" >&2; cat "$slog" >&2
    else
        pass "$name ($(grep -c '^{' "$out") sizes)"
    fi
}

run_pair write "" -- --op write --size 8,4096,65536 --iters 300
run_pair read "" -- --op read --size 8,4096,65536 --iters 300
run_pair send "" -- --op send --size 8,4096,65536 --iters 300 --qd 8
run_pair write_flush_visibility "" -- --op write_flush_visibility --size 8,4096 --iters 200
run_pair write_flush_persistent "" -- --op write_flush_persistent --size 8,4096 --iters 100
run_pair atomic_write "" -- --op atomic_write --size 8 --iters 200
run_pair wfv_busy_poll "--busy-poll" -- --op write_flush_visibility --size 8 --iters 100

# ---- failures must be quick and clean ------------------------------------------

# No server on the port: an error exit, well within the connect timeout.
if start_server "$WORK/gone.server.log"; then
    dead_port=$PORT
    kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""
    rc=0
    timeout 30 "$PERF" --client 127.0.0.1 --port "$dead_port" --op write --size 8 --iters 10 \
        >/dev/null 2>"$WORK/gone.err" || rc=$?
    if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q "error" "$WORK/gone.err"; then
        pass "client without a server fails (exit $rc)"
    else
        fail "client without a server: exit $rc"; cat "$WORK/gone.err" >&2
    fi
else
    fail "server for the no-server case did not start"
fi

# A request above the server's --size-max is rejected with the reason.
if start_server "$WORK/big.server.log" --size-max 4096; then
    rc=0
    timeout 30 "$PERF" --client 127.0.0.1 --port "$PORT" --op write --size 8192 --iters 10 \
        >/dev/null 2>"$WORK/big.err" || rc=$?
    src=0
    stop_server || src=$?
    if [[ $rc -ne 0 && $rc -ne 124 && $src -ne 124 ]] && grep -q "size-max" "$WORK/big.err"; then
        pass "oversized request rejected with its reason"
    else
        fail "oversized request: client exit $rc, server exit $src"; cat "$WORK/big.err" >&2
    fi
else
    fail "server for the oversized case did not start"
fi

# Usage errors exit 2.
rc=0
"$PERF" --client 127.0.0.1 --port 1 --op atomic_write --size 16 >/dev/null 2>&1 || rc=$?
if [[ $rc -eq 2 ]]; then pass "usage error exits 2"; else fail "usage error: exit $rc"; fi

if [[ $FAILURES -ne 0 ]]; then
    echo "smoke.sh: $FAILURES failure(s)" >&2
    exit 1
fi
echo "smoke.sh: all passed"
