#!/usr/bin/env bash
# The same-host baselines of issue 10 in one run, one table:
#
#   1. remora-bench-samehost: single-thread memcpy, process_vm_writev into a
#      child process (cma), the same split over both processes in batches
#      of 16 (cma-pair: the most cross-memory attach gives two processes),
#      libfabric shm between two processes;
#   2. UCX ucx_perftest over shared memory (UCX_TLS=sm) on 127.0.0.1, if
#      installed (Debian package ucx-utils): ucp_put_bw at every size and
#      ucp_put_lat at 8 bytes, on memory UCX allocates itself; and, if built
#      (UCX found at configure time), remora-bench-ucx-user: the same UCX puts
#      on memory the program allocated and registered itself (ucx-user);
#   3. Remora on this host: remora-perf over tcp on 127.0.0.1 (the
#      same-host direct path turned off with REMORA_SAMEHOST=0: remora-tcp),
#      and the same with the path on (its default; REMORA_SAMEHOST=1 on
#      both sides: remora-direct; and into a target buffer the server's
#      zone allocated, which the client maps: remora-mapped; and with
#      writes of 16 KiB and more sent over the message ring,
#      REMORA_RING_WRITES=1: remora-direct-ring; and with the peer moving
#      no part of split transfers, REMORA_PEER_HELPER=0:
#      remora-direct-nopeer): write
#      bandwidth (64 KiB, 1 MiB; qd 16),
#      read bandwidth (64 KiB), 8-byte write latency (one at a time, both
#      busy-polling), 8-byte write + VISIBILITY flush latency
#      (target asleep, and target and client busy-polling), send bandwidth
#      (4 KiB, 64 KiB; qd 16) and 64-byte send latency (qd 1, server
#      asleep); sends have no remora-mapped variant;
#   4. the same-host writes again into a target as long as --span, which the
#      writes walk (each at the offset after the last one's): memcpy, cma
#      and libfabric-shm (remora-bench-samehost --target-span), and Remora
#      with the path on, its regions moved into huge pages (the default) and
#      left in 4 KiB pages (REMORA_HUGEPAGES=0). Their rows' engines end in
#      "@span".
#
# Every bandwidth is also given as a ratio to memcpy of the same size
# measured in the same run. Each figure is the median of --reps repetitions.
# Each row also says how much of the host's CPU time a hypervisor stole
# while it was measured (steal %, from /proc/stat).
#
#   bench/samehost.sh [--build DIR] [--reps N] [--duration S] [--span BYTES]
#                     [--markdown FILE]
#
#   --build DIR     the build directory with bin/remora-bench-samehost and
#                   bin/remora-perf (default build, relative to the repository)
#   --reps N        repetitions of every measurement (default 3)
#   --duration S    seconds of one remora-bench-samehost repetition per engine
#                   and size (default 0.3)
#   --span BYTES    the targets' length in part 4 (k, m, g suffixes; default
#                   64m; 0 leaves part 4 out)
#   --markdown FILE also write the table and notes as Markdown
#
#   UCX_PERFTEST    the ucx_perftest to run (default: the one on PATH; set
#                   it empty to leave UCX out)
#
# Needs bash, coreutils' timeout and python3 (standard library). Every
# process it starts is bounded by timeout and killed at exit if still there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=build
REPS=3
DURATION=0.3
SPAN=64m
MARKDOWN=""
STEP_TIMEOUT=120     # seconds, one client run (ucx_perftest or remora-perf)
SERVER_TIMEOUT=150   # seconds, one server (it leaves when its client is done)
BENCH_TIMEOUT=900    # seconds, the whole remora-bench-samehost run
UCX_TLS_USED=sm

die() { echo "samehost.sh: $*" >&2; exit 2; }    # usage / setup problem
warn() { echo "samehost.sh: $*" >&2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build) [[ $# -ge 2 ]] || die "--build needs a directory"
                 BUILD=$2; shift 2 ;;
        --reps) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--reps needs a positive number"
                REPS=$2; shift 2 ;;
        --duration) [[ $# -ge 2 && "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--duration needs seconds"
                    DURATION=$2; shift 2 ;;
        --span) [[ $# -ge 2 && "$2" =~ ^[0-9]+[kmg]?$ ]] || die "--span needs a size (64m, say) or 0"
                SPAN=$2; shift 2 ;;
        --markdown) [[ $# -ge 2 ]] || die "--markdown needs a file name"
                    MARKDOWN=$2; shift 2 ;;
        -h|--help) sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
samehost_tools || exit 2
# UCX_PERFTEST in the environment: the ucx_perftest to run (empty: none).
UCX_PERFTEST=${UCX_PERFTEST-$(command -v ucx_perftest || true)}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/remora-samehost.XXXXXX")
PIDS=()   # every background process started (timeout wrappers)
kill_started_on_exit

FAILED=()
UCX_SKIPPED=""
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
DATE=$(date '+%Y-%m-%d %H:%M %Z')

# ---- 1. remora-bench-samehost ----------------------------------------------------
echo "samehost.sh: remora-bench-samehost, $REPS repetitions of $DURATION s" >&2
if ! bounded "$BENCH_TIMEOUT" "$SAMEHOST" --json --reps "$REPS" -D "$DURATION" \
        </dev/null >"$WORK/samehost.json" 2>"$WORK/samehost.err"; then
    cat "$WORK/samehost.err" >&2
    FAILED+=("remora-bench-samehost")
fi

# ---- 4a. the same, walking a target of --span bytes -------------------------------
if [[ $SPAN != 0 ]]; then
    echo "samehost.sh: remora-bench-samehost --target-span $SPAN" >&2
    if ! bounded "$BENCH_TIMEOUT" "$SAMEHOST" --json --reps "$REPS" -D "$DURATION" --target-span "$SPAN" \
            --size 65536,1048576 --only memcpy,cma,cma-pair,libfabric-shm \
            </dev/null >"$WORK/samehost_span.json" 2>"$WORK/samehost_span.err"; then
        cat "$WORK/samehost_span.err" >&2
        FAILED+=("remora-bench-samehost --target-span")
    fi
fi

# ---- 2a. remora-bench-ucx-user: UCX's puts on memory the program registered ----
UCX_USER=$BUILD/bin/remora-bench-ucx-user
if [[ -x "$UCX_USER" ]]; then
    echo "samehost.sh: remora-bench-ucx-user, $REPS repetitions of $DURATION s" >&2
    if ! bounded "$BENCH_TIMEOUT" env UCX_TLS="$UCX_TLS_USED" "$UCX_USER" --json --reps "$REPS" -D "$DURATION" \
            </dev/null >"$WORK/ucx_user.json" 2>"$WORK/ucx_user.err"; then
        cat "$WORK/ucx_user.err" >&2
        FAILED+=("remora-bench-ucx-user")
    fi
else
    warn "$UCX_USER not built (UCX not found at configure time): no ucx-user rows"
    echo "ucx-user: skipped: remora-bench-ucx-user not built (UCX not found at configure time; Debian package" \
        "libucx-dev)" >"$WORK/ucx_user.skipped"
fi

# ---- 2. UCX ucx_perftest --------------------------------------------------------
# host_ticks: the host's CPU ticks so far and those stolen by a hypervisor
# (/proc/stat's first line: the sum of its first eight fields, the eighth),
# for the steal % of the runs that do not report it themselves.
host_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9; exit }' /proc/stat 2>/dev/null || true
}
# ucx_run TAG TEST SIZE ITERS: one server/client pair; the client's CSV line
# in $WORK/TAG.csv, its CPU in $WORK/TAG.cpu.
ucx_run() {
    local tag=$1 test=$2 size=$3 iters=$4 warm
    warm=$((iters / 10))
    PORT=$(free_port)
    if ! start_server "$WORK/$tag.server.log" env UCX_TLS="$UCX_TLS_USED" "$UCX_PERFTEST" -p "$PORT"; then
        warn "ucx_perftest server did not start ($tag)"; cat "$WORK/$tag.server.log" >&2
        stop_server; FAILED+=("ucx $tag"); return
    fi
    host_ticks >"$WORK/$tag.steal"
    if ! bounded "$STEP_TIMEOUT" env UCX_TLS="$UCX_TLS_USED" python3 -c "$CPU_WRAP" "$WORK/$tag.cpu" "$UCX_PERFTEST" \
            127.0.0.1 -p "$PORT" -t "$test" -s "$size" -n "$iters" -w "$warm" -f -v \
            </dev/null >"$WORK/$tag.csv" 2>"$WORK/$tag.err"; then
        warn "ucx_perftest $test -s $size failed"; cat "$WORK/$tag.err" "$WORK/$tag.server.log" >&2
        FAILED+=("ucx $tag")
    fi
    host_ticks >>"$WORK/$tag.steal"
    stop_server
    echo "$iters $warm" >"$WORK/$tag.iters"
}

# The UCX cases: test|size|iterations (a few tenths of a second each here).
UCX_CASES=(
    "ucp_put_bw|8|2000000"
    "ucp_put_bw|4096|1000000"
    "ucp_put_bw|65536|60000"
    "ucp_put_bw|1048576|4000"
    "ucp_put_lat|8|300000"
)
# The remora-perf cases: name|op|size|iterations|server flags|client flags.
REMORA_CASES=(
    "write|write|4096|40000||"
    "write|write|65536|20000||"
    "write|write|1048576|2000||"
    "write_lat|write|8|20000|--busy-poll|--busy-poll --qd 1"
    "wfv_asleep|write_flush_visibility|8|10000||"
    "wfv_busy|write_flush_visibility|8|20000|--busy-poll|--busy-poll"
    "read|read|65536|20000||"
    "read|read|1048576|2000||"
    "send|send|4096|40000||"
    "send|send|65536|20000||"
    "send_lat|send|64|20000||--qd 1"
)

# remora_run TAG OP SIZE ITERS "SERVER FLAGS" "CLIENT FLAGS": as compare.sh
# does it, a server on a free port and a client with --json.
# REMORA_SAMEHOST in the environment (0 or 1) reaches both processes.
remora_run() {
    local tag=$1 op=$2 size=$3 iters=$4 sflags=$5 cflags=$6
    PORT=$(free_port)
    # shellcheck disable=SC2086  # flags are words on purpose
    if ! start_server "$WORK/$tag.server.log" "$PERF" --server --port "$PORT" --address 127.0.0.1 \
            --provider tcp $sflags; then
        warn "remora-perf server did not start ($tag)"; cat "$WORK/$tag.server.log" >&2
        stop_server; FAILED+=("remora $tag"); return
    fi
    # shellcheck disable=SC2086
    if ! bounded "$STEP_TIMEOUT" python3 -c "$CPU_WRAP" "$WORK/$tag.cpu" "$PERF" --client 127.0.0.1 --port "$PORT" \
            --provider tcp --op "$op" --size "$size" --iters "$iters" --json $cflags \
            </dev/null >"$WORK/$tag.json" 2>"$WORK/$tag.err"; then
        warn "remora-perf --op $op --size $size failed"; cat "$WORK/$tag.err" "$WORK/$tag.server.log" >&2
        FAILED+=("remora $tag")
    fi
    stop_server
}

if [[ -z "$UCX_PERFTEST" ]]; then
    warn "ucx_perftest not installed (Debian: apt-get install ucx-utils): no UCX rows"
    UCX_SKIPPED="ucx-sm: skipped: ucx_perftest not installed (Debian package ucx-utils)"
fi
for ((rep = 1; rep <= REPS; rep++)); do
    if [[ -n "$UCX_PERFTEST" ]]; then
        for c in "${UCX_CASES[@]}"; do
            IFS='|' read -r test size iters <<<"$c"
            echo "samehost.sh: rep $rep/$REPS ucx_perftest $test size $size" >&2
            ucx_run "ucx.$test.$size.$rep" "$test" "$size" "$iters"
        done
    fi
    for c in "${REMORA_CASES[@]}"; do
        IFS='|' read -r name op size iters sflags cflags <<<"$c"
        # 0: tcp; 1: the direct path into the server's heap buffer (cross-
        # memory attach); 2: the direct path into a buffer the server's zone
        # allocated (--shared-target: mapped by the client, memcpy).
        # 3: as 1 with each write or read its own call on the client's one
        # thread (REMORA_COPY_HELPER=0 REMORA_GATHER_WRITES=0), for the write,
        # write latency and read rows.
        # 6: as 1 with writes of 16 KiB and more sent over the server's
        # message ring (REMORA_RING_WRITES=1), for the write rows of 64 KiB
        # and more.
        # 7: as 1 with REMORA_PEER_HELPER=0 (the client's helper thread
        # moves the second part of split transfers, the server none), for
        # the write rows of 64 KiB and more.
        # Sends do not touch the server's buffer: no mapped variant.
        for variant in 0 1 2 3 6 7; do
            [[ $name == send* ]] && ((variant == 2)) && continue
            [[ $name != write && $name != read && $name != write_lat ]] && ((variant == 3)) && continue
            [[ $name != write ]] || ((size < 65536)) && ((variant == 6 || variant == 7)) && continue
            direct=$((variant > 0 ? 1 : 0))
            helper=$((variant == 3 ? 0 : 1))
            ring=$((variant == 6 ? 1 : 0))
            peer=$((variant == 7 ? 0 : 1))
            extra=""
            ((variant == 2)) && extra="--shared-target"
            echo "samehost.sh: rep $rep/$REPS remora-perf $name size $size REMORA_SAMEHOST=$direct" \
                "REMORA_COPY_HELPER=$helper REMORA_GATHER_WRITES=$helper REMORA_RING_WRITES=$ring" \
                "REMORA_PEER_HELPER=$peer $extra" >&2
            REMORA_SAMEHOST=$direct REMORA_COPY_HELPER=$helper REMORA_GATHER_WRITES=$helper REMORA_RING_WRITES=$ring \
                REMORA_PEER_HELPER=$peer \
                remora_run "remora$variant.$name.$size.$rep" "$op" "$size" "$iters" "$sflags $extra" "$cflags"
        done
    done
    # 4b. Writes walking a target of --span bytes, the path on: 4, its
    # regions moved into huge pages (default); 5, left in 4 KiB pages.
    [[ $SPAN == 0 ]] && continue
    for c in "write|65536|20000" "write|1048576|2000"; do
        IFS='|' read -r op size iters <<<"$c"
        for variant in 4 5; do
            huge=$((variant == 4 ? 1 : 0))
            echo "samehost.sh: rep $rep/$REPS remora-perf $op size $size --target-span $SPAN REMORA_HUGEPAGES=$huge" >&2
            REMORA_SAMEHOST=1 REMORA_HUGEPAGES=$huge remora_run "remora$variant.$op.$size.$rep" "$op" "$size" \
                "$iters" "--target-span $SPAN" ""
        done
    done
done

# ---- the table ------------------------------------------------------------------
UCX_VERSION=""
[[ -n "$UCX_PERFTEST" ]] && UCX_VERSION=$(dpkg-query -W -f '${Version}' ucx-utils 2>/dev/null || echo "?")
rc=0
python3 - "$WORK" "$REPS" "$DURATION" "$MARKDOWN" "$LOAD_BEFORE" "$DATE" "$UCX_VERSION" "$UCX_TLS_USED" \
    "${FAILED[*]+"${FAILED[*]}"}" "$UCX_SKIPPED" "$SPAN" <<'EOF' || rc=$?
import glob, json, os, platform, statistics, sys

work, reps, duration, markdown, load_before, date, ucx_version, ucx_tls, failed, ucx_skipped, span_text = sys.argv[1:12]

def cpu(path):
    with open(path) as f:
        u, s = f.read().split()
    return float(u) + float(s)

rows, skipped, notes = [], [], []

def steal(path):
    """The steal % between the two host_ticks lines of `path`; None when not known."""
    try:
        (t0, s0), (t1, s1) = [[int(x) for x in l.split()] for l in open(path).read().split("\n") if l.strip()]
    except (OSError, ValueError):
        return None
    return 100.0 * (s1 - s0) / (t1 - t0) if t1 > t0 and s1 >= s0 else None

def median_known(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

def span(values):
    values = list(values)
    return (min(values), max(values))

# 1. remora-bench-samehost: medians already (4a: the same, walking a span).
span_path = os.path.join(work, "samehost_span.json")
for line in [l for p in [os.path.join(work, "samehost.json")] + ([span_path] if os.path.exists(span_path) else [])
             for l in open(p)]:
    if not line.startswith("{"):
        continue
    o = json.loads(line)
    if o.get("span"):
        o["engine"] += "@span"
    if "skipped" in o:
        skipped.append(f"{o['engine']}: skipped: {o['skipped']}")
    elif "note" in o:
        notes.append(o["note"])
    else:
        lat = o["lat_p50_us"] is not None
        rows.append(dict(engine=o["engine"], op=o["op"], size=o["size"], qd=o["qd"],
                         completion=o["completion"] or "-", gbps=o["gbps"], p50=o["lat_p50_us"],
                         p99=o["lat_p99_us"], cpu=o["cpu_us_per_op"], steal=o.get("steal_pct"),
                         spread=(o["lat_p50_us_min"], o["lat_p50_us_max"]) if lat else (o["gbps_min"], o["gbps_max"])))

# 2. ucx_perftest: CSV "iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr";
# bandwidth in MiB/s (UCX's MB/s), latency in microseconds.
ucx = {}
for path in glob.glob(os.path.join(work, "ucx.*.csv")):
    _, test, size, rep = os.path.basename(path)[:-4].split(".")
    vals = None
    for line in open(path):
        f = line.strip().split(",")
        if len(f) == 8 and f[0].strip().isdigit():
            vals = [float(x) for x in f]
    if vals is None:
        continue
    iters, warm = (int(x) for x in open(path[:-4] + ".iters").read().split())
    c = cpu(path[:-4] + ".cpu") / (iters + warm) * 1e6
    ucx.setdefault((test, int(size)), []).append((vals[5] * 1048576 / 1e9, vals[1], c, steal(path[:-4] + ".steal")))
for (test, size), runs in sorted(ucx.items()):
    lat = test == "ucp_put_lat"
    rows.append(dict(engine="ucx-sm", op="put_lat" if lat else "put_bw", size=size, qd=1 if lat else "-",
                     completion="-", gbps=statistics.median(r[0] for r in runs),
                     p50=statistics.median(r[1] for r in runs) if lat else None, p99=None,
                     cpu=statistics.median(r[2] for r in runs), steal=median_known(r[3] for r in runs),
                     spread=span(r[1] if lat else r[0] for r in runs)))

# 2a. remora-bench-ucx-user: medians already, its range the lowest and highest repetition.
ucx_user_notes = []
if os.path.exists(os.path.join(work, "ucx_user.json")):
    for line in open(os.path.join(work, "ucx_user.json")):
        if not line.startswith("{"):
            continue
        o = json.loads(line)
        if "note" in o:
            ucx_user_notes.append("ucx-user: " + o["note"])
            continue
        rows.append(dict(engine="ucx-user", op=o["op"], size=o["size"], qd=o["qd"], completion="-", gbps=o["gbps"],
                         p50=o["p50_us"], p99=o["p99_us"], cpu=o["cpu_us_per_op"], steal=o.get("steal_pct"),
                         spread=tuple(o["range"])))
    ucx_user_notes.insert(0, "ucx-user: remora-bench-ucx-user (bench/ucx_user.cpp): UCX's puts as ucx-sm's, but on memory "
                          "the program allocated (aligned_alloc) and registered (ucp_mem_map of address and length), "
                          "parent and forked child; put_bw: ucp_put_nbx with at most 16 outstanding, then "
                          "ucp_worker_flush inside each timed interval; put_lat: as ucx-sm's; its own medians of "
                          f"{reps} repetitions of {duration} s; CPU us/op: the parent over the timed part only")
if os.path.exists(os.path.join(work, "ucx_user.skipped")):
    ucx_user_notes.append(open(os.path.join(work, "ucx_user.skipped")).read().strip())

# 3. remora-perf
remora = {}
for path in glob.glob(os.path.join(work, "remora[01234567].*.json")):
    engine, name, size, rep = os.path.basename(path)[:-5].split(".")
    engine = {"remora0": "remora-tcp", "remora1": "remora-direct", "remora2": "remora-mapped",
              "remora3": "remora-direct-single", "remora4": "remora-direct@span",
              "remora5": "remora-direct-4k@span", "remora6": "remora-direct-ring",
              "remora7": "remora-direct-nopeer"}[engine]
    for line in open(path):
        if line.startswith("{"):
            o = json.loads(line)
            if "cpu_us_per_op" in o:  # the client over its measured operations
                c = float(o["cpu_us_per_op"])
            else:  # an older remora-perf: the client's whole life
                iters = int(o["iters"])
                warm = min(max(iters // 10, 16), 200)  # perf_cli.hpp's warm-up
                c = cpu(path[:-5] + ".cpu") / (iters + warm) * 1e6
            remora.setdefault((engine, name, int(size)), []).append((o, c))
LABEL = {"write": ("write", "delivery"), "read": ("read", "-"), "write_lat": ("write", "busy-poll"),
         "wfv_asleep": ("write+flush_vis", "target asleep"),
         "wfv_busy": ("write+flush_vis", "busy-poll"), "send": ("send", "acknowledged"),
         "send_lat": ("send", "target asleep")}
ORDER = list(LABEL)
for (engine, name, size), runs in sorted(remora.items(), key=lambda kv: (kv[0][0], ORDER.index(kv[0][1]), kv[0][2])):
    op, how = LABEL[name]
    lat = name not in ("write", "read", "send")
    rows.append(dict(engine=engine, op=op, size=size, qd=runs[0][0]["qd"], completion=how,
                     gbps=statistics.median(r[0]["gbps"] for r in runs),
                     p50=statistics.median(r[0]["lat_p50_us"] for r in runs) if lat else None,
                     p99=statistics.median(r[0]["lat_p99_us"] for r in runs) if lat else None,
                     cpu=statistics.median(r[1] for r in runs),
                     steal=median_known(r[0].get("steal_pct") for r in runs),
                     spread=span(r[0]["lat_p50_us" if lat else "gbps"] for r in runs)))

# Each row's ratio is to the memcpy row of its own kind (walking a span or not).
memcpy = {(r["size"], r["engine"].endswith("@span")): r["gbps"] for r in rows if r["engine"].startswith("memcpy")}

def f3(v):
    return "-" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.1f}")

table = []
for r in rows:
    bw_row = r["p50"] is None
    ratio = "-"
    key = (r["size"], r["engine"].endswith("@span"))
    if bw_row and key in memcpy and not r["engine"].startswith("memcpy"):
        ratio = f"{r['gbps'] / memcpy[key]:.3f}"
    lo, hi = r["spread"]
    table.append((r["engine"], r["op"], str(r["size"]), str(r["qd"]), r["completion"],
                  f3(r["gbps"]), ratio, f3(r["p50"]), f3(r["p99"]), f3(r["cpu"]), f"{f3(lo)}-{f3(hi)}",
                  "-" if r["steal"] is None else f"{r['steal']:.1f}"))
head = ("engine", "op", "size", "qd", "completion", "GB/s", "x memcpy", "p50 us", "p99 us", "CPU us/op",
        "range", "steal %")
widths = [max(len(t[i]) for t in table + [head]) for i in range(len(head))]
def line(t):
    return "  ".join(c.ljust(w) if i in (0, 1, 4) else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths)))
print(line(head))
print(line(tuple("-" * w for w in widths)))
for t in table:
    print(line(t))

load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
notes = [
    f"median of {reps} repetitions of each measurement; remora-bench-samehost: {duration} s per repetition, "
    "engine and size",
    "x memcpy = GB/s / single-thread memcpy GB/s of the same size, same run (bandwidth rows only)",
    "range = lowest and highest repetition of the row's figure: GB/s on bandwidth rows, p50 on latency rows",
    "steal % = the host's CPU time (all its CPUs) that the hypervisor gave to other guests during the row's "
    "timed part (/proc/stat; median of the repetitions; for ucx_perftest over the client's whole run): on a "
    "shared virtual machine it swings from run to run, and a row measured with much of it stolen (a "
    "two-process transfer losing one of two CPUs) is not comparable to one without",
    "CPU us/op = user + sys of the measuring process only (remora-bench-samehost's parent, the ucx_perftest "
    "client, the remora-perf client), per operation: over the timed operations for the first and last "
    "(remora-perf's cpu_us_per_op: all the client's threads, set-up and warm-up not counted), over its "
    "whole life for ucx_perftest; the target process's CPU is not counted (shm's target and UCX's server "
    "spin on a core; Remora's server moves part of large same-host transfers)",
    "libfabric-shm write: qd 16; latency rows: one 8-byte operation at a time, posted and polled for",
    "cma-pair write: qd 16 writes in batches of 16, each cut at the page nearest its middle: the measuring "
    "process moves the lower halves with one process_vm_writev while the child moves the upper halves from "
    "it with one process_vm_readv, both spinning between batches: the same-host direct path's split with "
    "nothing else (no checks, no completions, no last bytes placed after the rest), the most two processes "
    "get from cross-memory attach here",
    "remora-tcp: remora-perf over libfabric tcp on 127.0.0.1 (REMORA_SAMEHOST=0), writes delivery-complete (qd 16); "
    "write at 8 bytes (busy-poll): one 8-byte write at a time, target and client busy-polling; "
    "write+flush_vis: an 8-byte write then a VISIBILITY flush, one at a time, target asleep (default) or "
    "target and client busy-polling; read: 64 KiB reads, qd 16; send: sends at qd 16, each complete when the "
    "server handled it (acknowledged); send at 64 bytes: one at a time, server asleep",
    "remora-direct: the same runs with the same-host direct path on (REMORA_SAMEHOST=1 on both sides): writes and reads are placed with "
    "process_vm_writev/readv after Remora's key, bounds and privilege checks (remora-perf's memory is "
    "ordinary heap memory); the flush of a range just written completes at the initiator; sends are copied "
    "into the server's message ring (docs/design.md, \"Same-host message rings\")",
    "remora-direct: writes posted back to back while the client polls are placed by one process_vm_writev "
    "call, and transfers of 256 KiB and more are split over the client's thread and the server, which moves "
    "the second part from its side (docs/design.md, \"The peer moves half\"); remora-direct-nopeer: the same "
    "runs with REMORA_PEER_HELPER=0 (the second part moved by a helper thread of the client); remora-direct-ring: the same runs with REMORA_RING_WRITES=1 (writes of 16 KiB and more "
    "copied into the server's message ring by the client and out of it by the server's agent: docs/design.md, "
    "\"Writes over the ring\"); remora-direct-single: the same runs with REMORA_COPY_HELPER=0 "
    "REMORA_GATHER_WRITES=0 (each write or read its own call, on the client's thread)",
    "remora-mapped: the same with the server's target buffer from ProtectionZone::allocate "
    "(remora-perf --server --shared-target, a memfd): the client maps it once and copies with memcpy",
] + ([f"@span: the target is {span_text} long (memcpy's destination, the child's buffer of cma, cma-pair and "
      "libfabric-shm, the remora-perf server's heap buffer: --target-span) and the writes walk it, each at the "
      "offset after the last one's; memcpy@span is their x memcpy baseline; remora-direct@span: the path on, the "
      "server's region moved into huge pages after registration (the default; the server waits until its huge "
      "pages stop changing before it answers); remora-direct-4k@span: the same with REMORA_HUGEPAGES=0 "
      "(4 KiB pages, as cma@span's and libfabric-shm@span's targets)"] if span_text != "0" else []
) + ([f"ucx-sm: ucx_perftest (ucx-utils {ucx_version}), UCX_TLS={ucx_tls}, memory UCX allocates itself "
       "(ucp_mem_map ALLOCATE); put_bw: puts streamed with UCX's default window, no completion waited for per put; "
       "put_lat: half a "
       "round trip of a put ping-pong (each side polls its memory for the peer's put)"] if ucx_version else []
) + notes + skipped + ([ucx_skipped] if ucx_skipped else [])
notes += ucx_user_notes
if failed:
    notes.append("FAILED (no row): " + failed)
notes.append(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}, {date}; "
             f"load average {load_before} before, {load_after} after")
print()
for n in notes:
    print("note: " + n)
if markdown:
    md = ["| " + " | ".join(head) + " |", "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    md += ["| " + " | ".join(t) + " |" for t in table]
    md += [""] + [f"- {n}" for n in notes]
    with open(markdown, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"\nMarkdown written to {markdown}")
EOF
((rc == 0)) || { warn "building the table failed"; exit 1; }
if ((${#FAILED[@]})); then
    warn "failed: ${FAILED[*]}"
    exit 1
fi
