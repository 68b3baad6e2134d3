#!/usr/bin/env bash
# Smoke test of the Remora tools on 127.0.0.1: remora-info, then a short
# remora-perf server/client pair for every operation, the perftest habits
# (-a, -D, --connections, --bidirectional, --report_gbits), the JSON
# settings, the --plot picture (parsed: one line per series and panel, one
# point per size with the JSON's values, the names in the legend; also with
# remora-bench-raw's results on the same axes when it is built), plus
# failure cases that must end quickly with an error; and one short run of
# remora-bench-samehost (bench/samehost.cpp) and of remora-bench-ucx-user
# (bench/ucx_user.cpp) when they are built. Exits non-zero on any failure.
#
#   tools/smoke.sh [BIN_DIR]
#
#   BIN_DIR    where remora-info and remora-perf are (default: $REMORA_BIN_DIR,
#              else build/bin next to this script's directory); the plot
#              check with the raw baseline uses remora-bench-raw from there
#   PROVIDER   libfabric provider (default tcp)
#
# Needs bash, coreutils (timeout) and python3 (standard library: the JSON
# and SVG checks). Every process it starts is bounded by a timeout, and
# servers still running at exit are killed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${1:-${REMORA_BIN_DIR:-$ROOT/build/bin}}
PROVIDER=${PROVIDER:-tcp}
INFO=$BIN_DIR/remora-info
PERF=$BIN_DIR/remora-perf
RAW=$BIN_DIR/remora-bench-raw
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
command -v python3 >/dev/null || { echo "smoke.sh: python3 is required (JSON and SVG checks)" >&2; exit 2; }

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
if timeout 30 "$INFO" --check >"$WORK/check.txt" 2>&1 && grep -q '^ok .*DAT IA name ofi-.*-lo$' "$WORK/check.txt" &&
    grep -q '^Remora can run here' "$WORK/check.txt"; then
    pass "remora-info --check finds Remora usable and names the loopback IA"
else
    fail "remora-info --check"; cat "$WORK/check.txt" >&2
fi
# The same-host switches: their state, and a value the library would ignore.
# (Where the kernel forbids the path, ptrace_scope 3, their lines are left out.)
if [ "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null)" = 3 ]; then
    echo "smoke.sh: skipped: remora-info --check and the same-host switches (ptrace_scope 3 forbids the path)"
elif grep -q '^ok .*same-host writes (and reads) posted back to back.*placed together by one call' "$WORK/check.txt" &&
    grep -q '^ok .*same-host transfers of 256 KiB and more (one, a copy through a mapping, or a batch of writes, through a mapping too, or of reads): split over' "$WORK/check.txt" &&
    grep -Eq '^(ok|warn) .*same-host regions of ordinary memory: (moved into|left in 4 KiB)' "$WORK/check.txt" &&
    grep -q '^ok .*same-host writes of 16 KiB and more .*: placed by cross-memory attach' "$WORK/check.txt" &&
    grep -q '^ok .*the second part of such a transfer: offered to the peer process' "$WORK/check.txt" &&
    REMORA_GATHER_WRITES=0 REMORA_COPY_HELPER=maybe REMORA_HUGEPAGES=0 REMORA_RING_WRITES=1 REMORA_PEER_HELPER=0 \
        timeout 30 "$INFO" --check \
        >"$WORK/check-switches.txt" 2>&1 &&
    grep -q '^ok .*each placed by its own call (REMORA_GATHER_WRITES=0)' "$WORK/check-switches.txt" &&
    grep -q '^ok .*copied into the connection.s message ring.*(REMORA_RING_WRITES=1)' "$WORK/check-switches.txt" &&
    grep -q '^ok .*left in the pages they have (REMORA_HUGEPAGES=0)' "$WORK/check-switches.txt" &&
    grep -q '^ok .*the second part of such a transfer: moved by this process (REMORA_PEER_HELPER=0)' \
        "$WORK/check-switches.txt" &&
    grep -q '^warn  REMORA_COPY_HELPER=maybe is not a value Remora knows' "$WORK/check-switches.txt" &&
    REMORA_SAMEHOST=0 timeout 30 "$INFO" --check >"$WORK/check-off.txt" 2>&1 &&
    grep -q '^ok .*same-host direct path: off (REMORA_SAMEHOST=0)' "$WORK/check-off.txt" &&
    ! grep -q 'same-host writes' "$WORK/check-off.txt"; then
    pass "remora-info --check reports the same-host switches"
else
    fail "remora-info --check and the same-host switches"; cat "$WORK/check.txt" "$WORK/check-switches.txt" >&2
fi
rc=0
FI_PROVIDER=no-such-provider timeout 30 "$INFO" --check >"$WORK/check-bad.txt" 2>&1 || rc=$?
if [ "$rc" = 1 ] && grep -q '^FAIL .*FI_PROVIDER is set' "$WORK/check-bad.txt" &&
    grep -q 'fix: unset FI_PROVIDER' "$WORK/check-bad.txt"; then
    pass "remora-info --check says what is wrong and how to fix it"
else
    fail "remora-info --check with FI_PROVIDER excluding every provider (rc=$rc)"; cat "$WORK/check-bad.txt" >&2
fi
rc=0
timeout 30 "$INFO" --check --json >/dev/null 2>&1 || rc=$?
if [ "$rc" = 2 ]; then pass "remora-info --check --json is a usage error"; else fail "remora-info --check --json exited $rc"; fi
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
        for key in op size iters qd gbps mops lat_p50_us lat_p99_us lat_p999_us cpu_us_per_op engine; do
            [[ "$line" == *"\"$key\":"* ]] || { echo "missing key $key: $line"; return 1; }
        done
        [[ "$line" == *"\"op\":\"$op\""* && "$line" == *"\"size\":$size,"* &&
            "$line" == *'"engine":"remora"'* ]] || { echo "unexpected values: $line"; return 1; }
        if [[ -n "$iters" ]]; then
            [[ "$line" == *"\"iters\":$iters,"* ]] || { echo "not $iters iterations: $line"; return 1; }
        else
            [[ "$line" =~ \"iters\":[1-9] ]] || { echo "no iterations: $line"; return 1; }
        fi
        # Something was measured: a non-zero median latency, and the client's
        # CPU over the operations is a number (0 when they took under the
        # clock's tick).
        [[ "$line" =~ \"lat_p50_us\":([0-9.]+) ]] && [[ "${BASH_REMATCH[1]}" != "0.000" ]] ||
            { echo "zero latency: $line"; return 1; }
        [[ "$line" =~ \"cpu_us_per_op\":[0-9]+\.[0-9]{3}[,}] ]] || { echo "no CPU per operation: $line"; return 1; }
        # The host's stolen CPU time, when a clock tick passed during the run.
        if [[ "$line" == *'"steal_pct":'* ]]; then
            [[ "$line" =~ \"steal_pct\":([0-9]+)\.[0-9][,}] ]] && ((BASH_REMATCH[1] <= 100)) ||
                { echo "bad steal_pct: $line"; return 1; }
        fi
    done
}

# check_settings FILE KEY=VALUE...: every JSON line has a "settings" object
# with every setting the tools record, and these values (as JSON text; a key
# not in the settings is looked up among the results).
check_settings() {
    python3 - "$@" <<'EOF'
import json, sys
path, want = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
KEYS = ["tool", "engine", "remora_version", "libfabric_version", "host", "cpus", "provider", "server",
        "port", "address", "op", "sizes", "qd", "client_wait", "run_by", "iters", "duration_s", "completion",
        "target_mode", "connections", "bidirectional", "bandwidth_unit"]
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
if not lines:
    sys.exit("no JSON lines")
for obj in lines:
    s = obj.get("settings")
    if not isinstance(s, dict):
        sys.exit(f"no settings object: {obj}")
    missing = [k for k in KEYS if k not in s]
    if missing:
        sys.exit(f"settings lack {missing}: {s}")
    if s["sizes"] != [o["size"] for o in lines]:
        sys.exit(f"settings.sizes {s['sizes']} are not the sizes measured")
    if not (isinstance(s["cpus"], int) and s["cpus"] > 0 and s["remora_version"] and s["libfabric_version"]):
        sys.exit(f"bad cpus or versions: {s}")
    for k, v in want.items():
        got = json.dumps(s[k] if k in s else obj.get(k))
        if got != v:
            sys.exit(f"{k} is {got}, expected {v}")
EOF
}

# check_svg SVG "NAME|NAME..." JSON...: the picture of --plot has both panels
# (bandwidth, latency), in each one polyline per series (in legend order,
# named as given) with one point per JSON line of that series' file, at
# increasing sizes, whose marker values are the JSON's (to the 3
# significant digits shown); the legend names the series.
check_svg() {
    python3 - "$@" <<'EOF'
import json, math, sys
import xml.etree.ElementTree as ET
svg_path, names, files = sys.argv[1], sys.argv[2].split("|"), sys.argv[3:]
NS = "{http://www.w3.org/2000/svg}"
try:
    root = ET.parse(svg_path).getroot()
except (OSError, ET.ParseError) as e:
    sys.exit(f"{svg_path}: not well-formed SVG: {e}")
if root.tag != NS + "svg":
    sys.exit(f"root element is {root.tag}")
_, _, width, height = (float(v) for v in root.get("viewBox").split())
results = [sorted((json.loads(l) for l in open(f) if l.startswith("{")), key=lambda r: r["size"]) for f in files]
if len(results) != len(names):
    sys.exit("one JSON file per series expected")
panels = {g.get("id"): g for g in root.iter(NS + "g") if g.get("class") == "panel"}
if set(panels) != {"bandwidth", "latency"}:
    sys.exit(f"panels {sorted(panels)}")
for pid, metric in (("bandwidth", "gbps"), ("latency", "lat_p50_us")):
    g = panels[pid]
    lines = [p for p in g.iter(NS + "polyline") if p.get("class") == "series"]
    got = [p.get("data-series") for p in lines]
    if got != names:
        sys.exit(f"{pid}: series {got}, expected {names}")
    markers = {m.get("data-series"): m for m in g.iter(NS + "g") if m.get("class") == "markers"}
    for line, name, rows in zip(lines, names, results):
        pts = [tuple(float(c) for c in p.split(",")) for p in line.get("points").split()]
        if len(pts) != len(rows) or int(line.get("data-points")) != len(rows):
            sys.exit(f"{pid}/{name}: {len(pts)} points for {len(rows)} sizes")
        xs = [x for x, _ in pts]
        if any(b <= a for a, b in zip(xs, xs[1:])):
            sys.exit(f"{pid}/{name}: sizes not increasing left to right")
        if not all(math.isfinite(x + y) and 0 <= x <= width and 0 <= y <= height for x, y in pts):
            sys.exit(f"{pid}/{name}: a point outside the picture")
        titles = [c.find(NS + "title").text for c in markers[name].iter(NS + "circle")]
        if len(titles) != len(rows):
            sys.exit(f"{pid}/{name}: {len(titles)} markers for {len(rows)} sizes")
        for t, row in zip(titles, rows):
            shown = float(t.split(":")[1].split()[0])
            # 3 significant digits of the value the JSON rounds to 6 decimals.
            if abs(shown - row[metric]) > max(0.006 * abs(row[metric]), 1e-6):
                sys.exit(f"{pid}/{name}: size {row['size']} shows {shown}, the JSON says {row[metric]}")
legend = [g for g in root.iter(NS + "g") if g.get("class") == "legend"]
texts = [t.text for t in legend[0].iter(NS + "text")] if legend else []
if texts != names:
    sys.exit(f"legend {texts}, expected {names}")
EOF
}

# run_pair NAME SERVER_FLAGS -- CLIENT ARGS...
run_pair() {
    local name=$1 sflags=$2
    shift 3
    local slog="$WORK/$name.server.log" out="$WORK/$name.out" err="$WORK/$name.err" op="" sizes="" iters="" a
    local all=0 all_max=8388608 s
    local -a args=("$@")
    for ((a = 0; a < ${#args[@]}; a++)); do
        case "${args[$a]}" in
            --op) op=${args[$((a + 1))]} ;;
            --size) sizes=${args[$((a + 1))]} ;;
            --iters) iters=${args[$((a + 1))]} ;;
            -a) all=1 ;;
            --all-max) all_max=${args[$((a + 1))]} ;;  # in plain bytes here
        esac
    done
    if ((all)); then
        sizes=""
        for ((s = 2; s <= all_max; s *= 2)); do sizes+="${sizes:+,}$s"; done
    fi
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
# an event-driven client: it sleeps on its completion queue's fd
run_pair wfv_wait "" -- --op write_flush_visibility --size 8,4096 --iters 200 --wait
# the target buffer allocated by the zone (a memfd), over tcp (the same-host
# direct path off) and, by default, mapped by the client
REMORA_SAMEHOST=0 run_pair shared_target "--shared-target" -- --op write --size 8,65536 --iters 200
run_pair shared_target_direct "--shared-target" -- --op write --size 8,65536 --iters 200

# ---- perftest habits, JSON settings, the plot ---------------------------------

# settings NAME KEY=VALUE...: check_settings on run NAME's output.
settings() {
    local name=$1 why
    shift
    [[ -s "$WORK/$name.out" ]] || return 0  # its run failed already
    if why=$(check_settings "$WORK/$name.out" "$@" 2>&1); then
        pass "$name: JSON settings"
    else
        fail "$name: JSON settings: $why"
    fi
}

# -a up to 16 KiB (14 sizes), drawn with --plot.
run_pair all "" -- --op write -a --all-max 16384 --iters 50 --plot "$WORK/all.svg"
settings wfv_wait client_wait='"fd"'
settings all client_wait='"busy-poll"' op='"write"' all_sizes=true run_by='"iterations"' iters=50 qd=16 connections=1 \
    bidirectional=false completion='"delivery"' target_mode='"asleep"' provider="\"$PROVIDER\""
if [[ -s "$WORK/all.out" ]]; then
    if why=$(check_svg "$WORK/all.svg" "remora write (delivery)" "$WORK/all.out" 2>&1); then
        pass "--plot: the SVG has the run's series, one point per size, the JSON's values"
    else
        fail "--plot: $why"
    fi
fi

run_pair connections4 "" -- --op write --size 4096,65536 --iters 200 --connections 4
settings connections4 connections=4 bidirectional=false
if [[ -s "$WORK/connections4.out" ]] && python3 -c '
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if not 0 < o["setup_ms_per_connection"] <= o["setup_ms_max"] <= o["setup_ms_total"]:
        sys.exit(1)' "$WORK/connections4.out"; then
    pass "connections4: set-up time per connection reported"
else
    fail "connections4: no set-up time per connection"
fi

# Bidirectional: the server's half is reported, with as many operations.
for op in write read send; do
    run_pair "bidir_$op" "" -- --op "$op" --size 4096,65536 --iters 200 --qd 8 --bidirectional
    settings "bidir_$op" bidirectional=true server_iters=200
done
run_pair bidir_send_conn2 "" -- --op send --size 4096 --iters 200 --qd 4 --bidirectional --connections 2
settings bidir_send_conn2 bidirectional=true connections=2 server_iters=200

# -D 1: a run of one second (after its warm-up), in Gb/s.
run_pair duration "" -- --op write --size 4096 -D 1 --report_gbits
settings duration run_by='"duration"' duration_s=1 iters=null bandwidth_unit='"Gb/s"'
if [[ -s "$WORK/duration.out" ]] && python3 -c '
import json, sys
o = json.loads(open(sys.argv[1]).readline())
sys.exit(0 if 0.9 <= o["seconds"] <= 5 and abs(o["gbits"] - 8 * o["gbps"]) < 1e-3 else 1)' "$WORK/duration.out"; then
    pass "duration: ran about 1 s, Gb/s = 8 x GB/s"
else
    fail "duration: not a 1 s run"; cat "$WORK/duration.out" >&2
fi

# The table with --report_gbits says Gb/s.
if start_server "$WORK/gbits.server.log"; then
    rc=0
    timeout "$CLIENT_TIMEOUT" "$PERF" --client 127.0.0.1 --port "$PORT" --op read --size 4096 --iters 100 \
        --report_gbits </dev/null >"$WORK/gbits.out" 2>"$WORK/gbits.err" || rc=$?
    stop_server || true
    if [[ $rc -eq 0 ]] && grep -q 'Gb/s' "$WORK/gbits.out" && ! grep -q 'GB/s' "$WORK/gbits.out"; then
        pass "--report_gbits table"
    else
        fail "--report_gbits table (exit $rc)"; cat "$WORK/gbits.out" "$WORK/gbits.err" >&2
    fi
else
    fail "server for --report_gbits did not start"; stop_server || true
fi

# --target-span: the server's buffer that long, which the client's writes
# walk; the server says how much of it is in huge pages once that settled.
if start_server "$WORK/span.server.log" --target-span 4m; then
    rc=0
    timeout "$CLIENT_TIMEOUT" "$PERF" --client 127.0.0.1 --port "$PORT" --op write --size 65536 --iters 200 \
        --json </dev/null >"$WORK/span.out" 2>"$WORK/span.err" || rc=$?
    stop_server || true
    if [[ $rc -eq 0 ]] && grep -q '^remora-perf: target 4194304 bytes, of which [0-9]* bytes in huge pages' \
            "$WORK/span.server.log"; then
        pass "--target-span 4m: writes walk the server's buffer"
    else
        fail "--target-span (exit $rc)"; cat "$WORK/span.out" "$WORK/span.err" "$WORK/span.server.log" >&2
    fi
else
    fail "server for --target-span did not start"; stop_server || true
fi
rc=0
timeout 10 "$PERF" --client 127.0.0.1 --port 1 --target-span 4m >/dev/null 2>&1 || rc=$?
if [[ $rc -eq 2 ]]; then
    pass "--target-span on the client is a usage error"
else
    fail "--target-span on the client: exit $rc"
fi

# The raw baseline's -a and JSON settings, then both on the same axes
# (--plot-json, as bench/compare.sh --plot does).
if [[ -x "$RAW" ]]; then
    raw_port=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
    timeout "$SERVER_TIMEOUT" "$RAW" --server --port "$raw_port" --address 127.0.0.1 --provider "$PROVIDER" \
        </dev/null >"$WORK/raw.server.log" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 100; i++)); do
        grep -q "listening" "$WORK/raw.server.log" && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    rc=0
    timeout "$CLIENT_TIMEOUT" "$RAW" --client 127.0.0.1 --port "$raw_port" --provider "$PROVIDER" --op write \
        -a --all-max 16k --iters 50 --wait --json </dev/null >"$WORK/raw.out" 2>"$WORK/raw.err" || rc=$?
    src=0
    stop_server || src=$?
    why=""
    if [[ $rc -eq 0 && $src -eq 0 && $(grep -c '^{' "$WORK/raw.out") -eq 14 ]] &&
        why=$(check_settings "$WORK/raw.out" tool='"remora-bench-raw"' all_sizes=true iters=50 client_wait='"fd"' 2>&1); then
        pass "remora-bench-raw -a --wait --json (14 sizes, settings)"
    else
        fail "remora-bench-raw -a: client exit $rc, server exit $src $why"
        cat "$WORK/raw.out" "$WORK/raw.err" "$WORK/raw.server.log" >&2
    fi
    rc=0
    timeout 30 "$PERF" --plot-json "$WORK/all.out,$WORK/raw.out=raw libfabric" --plot "$WORK/both.svg" \
        --plot-title "smoke" >"$WORK/both.err" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
        fail "--plot-json: exit $rc"; cat "$WORK/both.err" >&2
    elif why=$(check_svg "$WORK/both.svg" "remora write (delivery)|raw libfabric" "$WORK/all.out" \
        "$WORK/raw.out" 2>&1); then
        pass "--plot-json: remora and the raw baseline on the same axes"
    else
        fail "--plot-json: $why"
    fi
else
    echo "smoke.sh: skip: $RAW not built (the plot with the raw baseline)"
fi

# The same-host baselines (bench/samehost.cpp): one short run of every engine
# at one size; an engine this machine refuses (process_vm_writev forbidden,
# no shm provider) is reported as skipped, which is fine here. No timing is
# checked, only that it ran and said something about each engine.
check_samehost() {
    python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
seen = {}
stolen = False
for r in rows:
    if "note" in r:
        continue
    if "skipped" in r:
        seen.setdefault(r["engine"], "skipped")
        continue
    if not (r["size"] in (4096, 8) and r["gbps"] > 0 and r["cpu_us_per_op"] >= 0 and r["reps"] == 1):
        sys.exit(f"bad row: {r}")
    if r["steal_pct"] is not None and not 0 <= r["steal_pct"] <= 100:
        sys.exit(f"bad steal_pct: {r}")
    seen[r["engine"]] = "measured"
    stolen = stolen or r["steal_pct"] is not None
if not stolen:
    sys.exit("no row says how much CPU time was stolen (/proc/stat)")
for engine in ("memcpy", "cma", "libfabric-shm"):
    if engine not in seen:
        sys.exit(f"nothing about {engine}")
if seen["memcpy"] != "measured":
    sys.exit("memcpy not measured")
print(", ".join(f"{e} {s}" for e, s in seen.items()))
EOF
}
SAMEHOST=$BIN_DIR/remora-bench-samehost
if [[ -x "$SAMEHOST" ]]; then
    rc=0
    timeout 60 "$SAMEHOST" --size 4096 --reps 1 -D 0.05 --json </dev/null >"$WORK/samehost.out" \
        2>"$WORK/samehost.err" || rc=$?
    why=""
    if [[ $rc -eq 0 ]] && why=$(check_samehost "$WORK/samehost.out" 2>&1); then
        pass "remora-bench-samehost --size 4096 --reps 1 ($why)"
    else
        fail "remora-bench-samehost: exit $rc $why"; cat "$WORK/samehost.out" "$WORK/samehost.err" >&2
    fi
    rc=0
    # 4 MiB: 1024 slots of 4 KiB, more than one timed chunk of any engine
    # posts, so an engine whose walk restarted with each chunk leaves the
    # child's check of every slot failing.
    timeout 60 "$SAMEHOST" --size 4096 --reps 1 -D 0.05 --json --target-span 4m --only memcpy,cma,libfabric-shm </dev/null \
        >"$WORK/samehost-span.out" 2>"$WORK/samehost-span.err" || rc=$?
    if [[ $rc -eq 0 ]] && python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bw = [r for r in rows if "gbps" in r and r["op"] != "write_lat"]
sys.exit(0 if bw and all(r["span"] == 4194304 for r in bw) else 1)' "$WORK/samehost-span.out"; then
        pass "remora-bench-samehost --target-span 4m"
    else
        fail "remora-bench-samehost --target-span: exit $rc"; cat "$WORK/samehost-span.out" "$WORK/samehost-span.err" >&2
    fi
    rc=0
    timeout 60 "$SAMEHOST" --size 16k --reps 1 -D 0.05 --json --only cma-pair </dev/null \
        >"$WORK/samehost-pair.out" 2>"$WORK/samehost-pair.err" || rc=$?
    if [[ $rc -eq 0 ]] && why=$(python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
if any(r.get("engine") == "cma-pair" and "skipped" in r for r in rows):
    print("skipped"); sys.exit(0)
bw = [r for r in rows if r.get("engine") == "cma-pair" and r.get("op") == "write"]
ok = len(bw) == 1 and bw[0]["size"] == 16384 and bw[0]["qd"] == 16 and bw[0]["gbps"] > 0
print("measured" if ok else f"bad rows: {rows}")
sys.exit(0 if ok else 1)' "$WORK/samehost-pair.out" 2>&1); then
        pass "remora-bench-samehost --only cma-pair ($why)"
    else
        fail "remora-bench-samehost --only cma-pair: exit $rc $why"; cat "$WORK/samehost-pair.out" "$WORK/samehost-pair.err" >&2
    fi
    rc=0
    timeout 10 "$SAMEHOST" --size 0 >/dev/null 2>&1 || rc=$?
    if [[ $rc -eq 2 ]]; then
        pass "remora-bench-samehost usage error exits 2"
    else
        fail "remora-bench-samehost --size 0: exit $rc"
    fi
else
    echo "smoke.sh: skip: $SAMEHOST not built (the same-host baselines)"
fi

# remora-bench-memwait (bench/memwait.cpp): a short ping-pong must finish
# (every round's write seen by the other side) and print its line; no
# timing is checked. Bad arguments exit 2.
MEMWAIT=$BIN_DIR/remora-bench-memwait
if [[ -x "$MEMWAIT" ]]; then
    rc=0
    timeout 60 "$MEMWAIT" --iters 300 --signal-every 4 </dev/null >"$WORK/memwait.out" 2>"$WORK/memwait.err" || rc=$?
    if [[ $rc -eq 0 ]] && grep -Eq '^size 8  signal-every 4  rounds 300  rtt p50 [0-9.]+ us .* CPU [0-9.]+ us/round' \
        "$WORK/memwait.out"; then
        pass "remora-bench-memwait --iters 300 --signal-every 4"
    else
        fail "remora-bench-memwait: exit $rc"; cat "$WORK/memwait.out" "$WORK/memwait.err" >&2
    fi
    rc=0
    timeout 10 "$MEMWAIT" --signal-every 0 >/dev/null 2>&1 || rc=$?
    if [[ $rc -eq 2 ]]; then
        pass "remora-bench-memwait usage error exits 2"
    else
        fail "remora-bench-memwait --signal-every 0: exit $rc"
    fi
else
    echo "smoke.sh: skip: $MEMWAIT not built"
fi

# remora-bench-ucx-user (bench/ucx_user.cpp, built when UCX is found): one
# short run must give a put_bw row at the size asked and the 8-byte put_lat
# row, over UCX_TLS=sm when the variable is unset; no timing is checked.
check_ucx_user() {
    python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ops = set()
for r in rows:
    if "note" in r:
        continue
    if not (r["engine"] == "ucx-user" and r["gbps"] > 0 and r["cpu_us_per_op"] >= 0 and r["reps"] == 1
            and len(r["range"]) == 2 and r["ucx_tls"] == "sm"):
        sys.exit(f"bad row: {r}")
    if r["op"] == "put_lat" and not (r["size"] == 8 and r["p50_us"] > 0):
        sys.exit(f"bad put_lat row: {r}")
    ops.add((r["op"], r["size"]))
if sorted(ops) != [("put_bw", 4096), ("put_lat", 8)]:
    sys.exit(f"rows: {sorted(ops)}")
print("put_bw 4096, put_lat 8")
EOF
}
UCX_USER=$BIN_DIR/remora-bench-ucx-user
if [[ -x "$UCX_USER" ]]; then
    rc=0
    # UCX_MEM_EVENTS=no: UCX's memory hooks (libucm, set up when the library
    # loads) intercept madvise, which glibc calls as a thread exits; under
    # the sanitizer builds' interceptors that crashed the program at exit
    # (TSan). They only keep UCX's registration cache current, which this
    # functional run does not need.
    env -u UCX_TLS UCX_MEM_EVENTS=no timeout 60 "$UCX_USER" --size 4096 --reps 1 -D 0.05 --json </dev/null >"$WORK/ucx_user.out" \
        2>"$WORK/ucx_user.err" || rc=$?
    why=""
    if [[ $rc -eq 0 ]] && why=$(check_ucx_user "$WORK/ucx_user.out" 2>&1); then
        pass "remora-bench-ucx-user --size 4096 --reps 1 ($why)"
    else
        fail "remora-bench-ucx-user: exit $rc $why"; cat "$WORK/ucx_user.out" "$WORK/ucx_user.err" >&2
    fi
    rc=0
    timeout 10 "$UCX_USER" --reps 0 >/dev/null 2>&1 || rc=$?
    if [[ $rc -eq 2 ]]; then
        pass "remora-bench-ucx-user usage error exits 2"
    else
        fail "remora-bench-ucx-user --reps 0: exit $rc"
    fi
else
    echo "smoke.sh: skip: $UCX_USER not built (UCX not found at configure time; Debian: libucx-dev)"
fi

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
usage_error() {
    local rc=0
    timeout 10 "$PERF" "$@" >/dev/null 2>&1 || rc=$?
    if [[ $rc -eq 2 ]]; then pass "usage error exits 2: $*"; else fail "usage error: exit $rc: $*"; fi
}
usage_error --client 127.0.0.1 --port 1 --op atomic_write --size 16
usage_error --client 127.0.0.1 --port 1 --op write -a --size 8
usage_error --client 127.0.0.1 --port 1 --op write --size 8 --iters 10 -D 1
usage_error --client 127.0.0.1 --port 1 --op atomic_write --size 8 --bidirectional
usage_error --client 127.0.0.1 --port 1 --op write --size 8 --connections 0
usage_error --server --port 0 --connections 2
usage_error --client 127.0.0.1 --port 1 --op write --size 8 --shared-target
usage_error --plot-json x.json

if [[ $FAILURES -ne 0 ]]; then
    echo "smoke.sh: $FAILURES failure(s)" >&2
    exit 1
fi
echo "smoke.sh: all passed"
