#!/usr/bin/env bash
# Compares remora-perf with the raw libfabric baseline remora-bench-raw on
# 127.0.0.1. Each measurement starts its own server on a free port; runs are
# interleaved (raw, remora, raw, remora, ...) and repeated, and the table
# shows the median of the repetitions: GB/s or latency, and the CPU time
# (user + sys) of both processes, client and server, per GB moved and per
# operation.
#
#   bench/compare.sh [--reps N] [--only CASE[,CASE...]] [--markdown FILE]
#                    [--plot FILE.svg [--plot-op OP] [--plot-max BYTES] [--plot-duration S]]
#   (cases: write, wfv_asleep, wfv_busy, wfv_wait, read, send; with --plot, --only may
#   name none of them to draw the picture only)
#
#   --plot FILE.svg   also sweep every power-of-two size (-a) with both tools,
#                     --plot-op (default write) up to --plot-max (default 8m),
#                     -D --plot-duration seconds per size (default 0.5), and
#                     draw the medians of the repetitions, bandwidth and p50
#                     latency, remora and raw on the same axes
#
#   REMORA_PERF       remora-perf to measure      (default build/bin/remora-perf)
#   REMORA_BENCH_RAW  the baseline                (default build/bin/remora-bench-raw)
#   PROVIDER          libfabric provider          (default tcp)
#
# Both processes run on this host, where Remora would take its same-host
# direct path by default: this script compares the transport, so it runs
# remora-perf with REMORA_SAMEHOST=0 (bench/samehost.sh measures the direct
# path against memcpy, shm and UCX).
#
# Needs only bash, coreutils' timeout and python3 (standard library).
set -euo pipefail
export REMORA_SAMEHOST=0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REMORA_PERF=${REMORA_PERF:-$ROOT/build/bin/remora-perf}
REMORA_BENCH_RAW=${REMORA_BENCH_RAW:-$ROOT/build/bin/remora-bench-raw}
PROVIDER=${PROVIDER:-tcp}
REPS=3
ONLY=""
MARKDOWN=""
PLOT=""
PLOT_OP="write"
PLOT_MAX=8m
PLOT_DURATION=0.5
CLIENT_TIMEOUT=180   # seconds, one client run
SERVER_TIMEOUT=240   # seconds, one server (it exits when its client leaves)

die() { echo "compare.sh: $*" >&2; exit 2; }    # usage / setup problem
fail() { echo "compare.sh: $*" >&2; exit 1; }   # a run failed

while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--reps needs a positive number"
                REPS=$2; shift 2 ;;
        --only) [[ $# -ge 2 ]] || die "--only needs a comma-separated list of cases"
                ONLY=",$2,"; shift 2 ;;
        --markdown) [[ $# -ge 2 ]] || die "--markdown needs a file name"
                    MARKDOWN=$2; shift 2 ;;
        --plot) [[ $# -ge 2 ]] || die "--plot needs a file name (.svg)"
                PLOT=$2; shift 2 ;;
        --plot-op) [[ $# -ge 2 ]] || die "--plot-op needs an operation"
                   PLOT_OP=$2; shift 2 ;;
        --plot-max) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*[kKmMgG]?$ ]] || die "--plot-max needs a size (e.g. 1m)"
                    PLOT_MAX=$2; shift 2 ;;
        --plot-duration) [[ $# -ge 2 && "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--plot-duration needs seconds"
                         PLOT_DURATION=$2; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

for tool in "$REMORA_PERF" "$REMORA_BENCH_RAW"; do
    if [[ ! -x "$tool" ]]; then
        case "$tool" in
            "$REMORA_PERF") var=REMORA_PERF ;;
            *) var=REMORA_BENCH_RAW ;;
        esac
        die "$(basename "$tool") not found or not executable at '$tool': build the project" \
            "first (cmake --build build), or point $var at it"
    fi
done
command -v python3 >/dev/null || die "python3 is required"
command -v timeout >/dev/null || die "timeout (coreutils) is required"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/remora-compare.XXXXXX")
SERVER_PID=""
cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
cpu_wrap() { python3 -c "$CPU_WRAP" "$@"; }

# run_one TAG BIN "SERVER FLAGS" CLIENT ARGS...
# Starts BIN as a server on a free port, runs BIN as a client against it with
# --json, and stores the client's output in $WORK/TAG.json and the CPU time
# of each in $WORK/TAG.server.cpu and $WORK/TAG.client.cpu ("user sys").
run_one() {
    local tag=$1 bin=$2 sflags=$3
    shift 3
    local port log="$WORK/$tag.server.log" err="$WORK/$tag.client.err" i
    port=$(free_port)
    # shellcheck disable=SC2086  # server flags are words on purpose
    cpu_wrap "$WORK/$tag.server.cpu" timeout "$SERVER_TIMEOUT" "$bin" --server --port "$port" \
        --address 127.0.0.1 --provider "$PROVIDER" $sflags </dev/null >"$log" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 100; i++)); do
        listening "$port" && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            cat "$log" >&2
            fail "$(basename "$bin") server failed to start ($tag)"
        fi
        sleep 0.1
    done
    listening "$port" || fail "$(basename "$bin") server not listening after 10 s ($tag)"

    if ! cpu_wrap "$WORK/$tag.client.cpu" timeout "$CLIENT_TIMEOUT" "$bin" --client 127.0.0.1 \
            --port "$port" --provider "$PROVIDER" --json "$@" </dev/null >"$WORK/$tag.json" 2>"$err"; then
        echo "--- client stderr ($tag):" >&2; cat "$err" >&2
        echo "--- server log ($tag):" >&2; cat "$log" >&2
        fail "$(basename "$bin") client failed: $(basename "$bin") --client ... $*"
    fi
    # The server leaves by itself when the client disconnects.
    for ((i = 0; i < 100; i++)); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "compare.sh: warning: $(basename "$bin") server still up 10 s after its" \
             "client left ($tag); killing it" >&2
        kill "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}

# The cases. Each line: case|op|size|iters|server flags|client extra flags.
# One size per run, so that each run lasts a fraction of a second at least
# (the iteration counts are passed to both tools: they do the same work).
# Every case runs its variants (below) in turn: raw, remora, raw, remora, ...
CASES=(
    "write|write|65536|20000||"
    "write|write|1048576|2000||"
    "wfv_asleep|write_flush_visibility|8|10000||"
    "wfv_busy|write_flush_visibility|8|20000|--busy-poll|--busy-poll"
    "wfv_wait|write_flush_visibility|4096|10000||--wait"
    "read|read|4096|100000||"
    "read|read|65536|20000||"
    "send|send|4096|100000||"
    "send|send|65536|20000||"
)
if [[ -n "$ONLY" ]]; then
    kept=()
    for c in "${CASES[@]}"; do [[ "$ONLY" == *",${c%%|*},"* ]] && kept+=("$c"); done
    ((${#kept[@]})) || [[ -n "$PLOT" ]] ||
        die "--only matched no case (cases: write, wfv_asleep, wfv_busy, wfv_wait, read, send)"
    CASES=(${kept[@]+"${kept[@]}"})
fi
if [[ -n "$PLOT" ]]; then
    case "$PLOT_OP" in
        write|read|send|write_flush_visibility|write_flush_persistent) ;;
        *) die "--plot-op: write, read, send, write_flush_visibility or write_flush_persistent" ;;
    esac
    : >"$PLOT" 2>/dev/null || die "--plot: cannot write '$PLOT'"
fi
# Variants: name|tool|client flags. remora-perf always runs with its own
# default completion; the raw baseline runs with both completion modes
# where the op has them.
variants_for() {
    case "$1" in
        write|send)
            echo "raw_delivery|raw|--completion delivery"
            echo "remora|remora|"
            echo "raw_default|raw|--completion default" ;;
        *)
            echo "raw|raw|"
            echo "remora|remora|" ;;
    esac
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
total=0
for c in ${CASES[@]+"${CASES[@]}"}; do total=$((total + $(variants_for "${c%%|*}" | wc -l))); done
[[ -n "$PLOT" ]] && total=$((total + $(variants_for "$PLOT_OP" | wc -l)))
total=$((total * REPS))
n=0
echo "compare.sh: $total runs ($REPS repetitions), provider $PROVIDER" >&2
for ((rep = 1; rep <= REPS; rep++)); do
    for c in ${CASES[@]+"${CASES[@]}"}; do
        IFS='|' read -r cname op size iters sflags cflags <<<"$c"
        while IFS='|' read -r vname tool vflags; do
            bin=$REMORA_BENCH_RAW
            [[ "$tool" == remora ]] && bin=$REMORA_PERF
            n=$((n + 1))
            printf 'compare.sh: [%d/%d] rep %d %s %s size %s\n' "$n" "$total" "$rep" \
                "$cname" "$vname" "$size" >&2
            # shellcheck disable=SC2086
            run_one "$cname.$vname.$rep.$size" "$bin" "$sflags" --op "$op" --size "$size" \
                --iters "$iters" $cflags $vflags
        done < <(variants_for "$cname")
    done
    if [[ -n "$PLOT" ]]; then
        # The sweep for the picture: every size in one run per tool.
        mkdir -p "$WORK/sweep"
        while IFS='|' read -r vname tool vflags; do
            bin=$REMORA_BENCH_RAW
            [[ "$tool" == remora ]] && bin=$REMORA_PERF
            n=$((n + 1))
            printf 'compare.sh: [%d/%d] rep %d sweep %s %s -a up to %s, %s s per size\n' "$n" "$total" \
                "$rep" "$PLOT_OP" "$vname" "$PLOT_MAX" "$PLOT_DURATION" >&2
            # shellcheck disable=SC2086
            run_one "sweep/$vname.$rep" "$bin" "" --op "$PLOT_OP" -a --all-max "$PLOT_MAX" \
                -D "$PLOT_DURATION" $vflags
        done < <(variants_for "$PLOT_OP")
    fi
done

if [[ -n "$PLOT" ]]; then
    # The medians of the repetitions, one JSON file per variant, drawn by
    # remora-perf --plot-json.
    specs=$(python3 - "$WORK/sweep" <<'EOF'
import glob, json, os, statistics, sys
d = sys.argv[1]
LABEL = {"raw": "raw libfabric", "raw_delivery": "raw libfabric (delivery)",
         "raw_default": "raw libfabric (default)", "remora": "remora"}
specs = []
for variant in ("raw_delivery", "raw", "remora", "raw_default"):
    by_size = {}
    for path in sorted(glob.glob(os.path.join(d, f"{variant}.*.json"))):
        for line in open(path):
            if line.startswith("{"):
                o = json.loads(line)
                by_size.setdefault(o["size"], []).append(o)
    if not by_size:
        continue
    out = os.path.join(d, f"median.{variant}.json")
    with open(out, "w") as f:
        for size in sorted(by_size):
            runs = by_size[size]
            row = dict(runs[0])
            for key in ("gbps", "gbits", "mops", "lat_p50_us", "lat_p99_us"):
                row[key] = statistics.median(r[key] for r in runs)
            row["reps"] = len(runs)
            f.write(json.dumps(row) + "\n")
    specs.append(f"{out}={LABEL[variant]}")
print(",".join(specs))
EOF
)
    timeout 60 "$REMORA_PERF" --plot-json "$specs" --plot "$PLOT" \
        --plot-title "$PLOT_OP on 127.0.0.1 ($PROVIDER): median of $REPS, -D $PLOT_DURATION s per size" ||
        fail "drawing $PLOT failed"
    echo "compare.sh: picture written to $PLOT" >&2
fi
((${#CASES[@]})) || exit 0

python3 - "$WORK" "$REPS" "$MARKDOWN" "$PROVIDER" "$LOAD_BEFORE" <<'EOF'
import glob, json, os, platform, statistics, sys, time

work, reps, markdown, provider, load_before = sys.argv[1:6]
reps = int(reps)

# (case, raw variant, label, metrics) in print order.
BW = ["gbps", "cpu_s_per_gb", "cpu_us_per_op"]
LAT = ["lat_p50_us", "lat_p99_us", "cpu_us_per_op"]
ROWS = [
    ("write", "raw_delivery", "write (raw: delivery)", BW),
    ("write", "raw_default", "write (raw: default)", BW),
    ("wfv_asleep", "raw", "write_flush_visibility, target asleep", LAT),
    ("wfv_busy", "raw", "write_flush_visibility, target busy-poll", LAT),
    ("wfv_wait", "raw", "write_flush_visibility, both asleep, client waits on its fd", LAT),
    ("read", "raw", "read", BW),
    ("send", "raw_delivery", "send (raw: delivery)", BW),
    ("send", "raw_default", "send (raw: default)", BW),
]
METRIC = {"gbps": "GB/s", "lat_p50_us": "lat p50 us", "lat_p99_us": "lat p99 us",
          "cpu_s_per_gb": "CPU s/GB", "cpu_us_per_op": "CPU us/op"}

def cpu_seconds(path):
    """user + sys seconds from a cpu_wrap file."""
    with open(path) as f:
        user, sys_ = f.read().split()
    return float(user) + float(sys_)

def warmup_iters(iters):
    """perf_cli.hpp's warmup_iters: both tools run it before --iters."""
    return min(max(iters // 10, 16), 200)

# results[(case, variant)][size][metric] = {repetition: value}
results, completion = {}, {}
for path in sorted(glob.glob(os.path.join(work, "*.json"))):
    case, variant, rep, _size = os.path.basename(path)[:-len(".json")].split(".")
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                sys.exit(f"compare.sh: bad JSON from {case}/{variant}: {line!r}")
            per = results.setdefault((case, variant), {}).setdefault(int(obj["size"]), {})
            for key, value in obj.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    per.setdefault(key, {})[int(rep)] = float(value)
            completion[(case, variant)] = obj.get("completion", "?")
            # CPU of both processes over their whole lives (set-up, warm-up
            # and run), per byte and per operation of warm-up + run.
            stem = path[:-len(".json")]
            cpu = cpu_seconds(stem + ".client.cpu") + cpu_seconds(stem + ".server.cpu")
            ops = int(obj["iters"]) + warmup_iters(int(obj["iters"]))
            per.setdefault("cpu_s_per_gb", {})[int(rep)] = cpu / (ops * int(obj["size"]) / 1e9)
            per.setdefault("cpu_us_per_op", {})[int(rep)] = cpu / ops * 1e6

def by_rep(case, variant, size, metric):
    values = results.get((case, variant), {}).get(size, {}).get(metric)
    if not values:
        sys.exit(f"compare.sh: no {metric} for {case}/{variant} size {size}")
    return values

def ratio(remora, raw):
    return remora / raw if raw else float("nan")

def fmt(v):
    return f"{v:.3f}" if v < 100 else f"{v:.1f}"

table = []
for case, raw_variant, label, metrics in ROWS:
    sizes = sorted(results.get((case, raw_variant), {}))
    for size in sizes:
        for metric in metrics:
            raw = by_rep(case, raw_variant, size, metric)
            rem = by_rep(case, "remora", size, metric)
            raw_med = statistics.median(raw.values())
            rem_med = statistics.median(rem.values())
            # Each remora run against the raw run of the same repetition
            # (they ran back to back): how much the ratio moves with noise.
            paired = [ratio(rem[r], raw[r]) for r in sorted(raw) if r in rem]
            spread = f"{min(paired):.2f}-{max(paired):.2f}"
            table.append((label, str(size), METRIC[metric], fmt(raw_med), fmt(rem_med),
                          f"{ratio(rem_med, raw_med):.2f}", spread))

head = ("op", "size", "metric", "raw", "remora", "ratio", "ratio range")
widths = [max(len(r[i]) for r in table + [head]) for i in range(len(head))]
def line(r):
    return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
print(line(head))
print(line(tuple("-" * w for w in widths)))
for r in table:
    print(line(r))
print()
notes = [
    f"median of {reps} interleaved repetitions; provider {provider}, 127.0.0.1",
    "ratio = remora / raw: above 1 is better for remora on GB/s, below 1 is better on latency "
    "and CPU",
    "CPU = user + sys seconds of both processes, client and server, over their whole lives "
    "(set-up, warm-up, run; getrusage of each), divided by the bytes or operations of warm-up "
    "and run; a busy-polling side counts its spinning",
    "ratio range = lowest and highest ratio of one repetition's back-to-back pair; a wide "
    "range means the machine was noisy",
    "remora-perf ran with its default completion: "
    + ", ".join(f"{c} {completion.get((c, 'remora'), '?')}"
                for c in ("write", "wfv_asleep", "read", "send") if (c, "remora") in completion),
]
for n in notes:
    print("note: " + n)

md = ["| op | size | metric | raw | remora | ratio (remora/raw) | ratio range |",
      "|---|---:|---|---:|---:|---:|---:|"]
md += ["| " + " | ".join(r) + " |" for r in table]
md += [""] + [f"- {n}" for n in notes]
load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
md += [f"- machine: {platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
       f"{time.strftime('%Y-%m-%d %H:%M %Z')}; load average {load_before} before, "
       f"{load_after} after (the benchmark itself adds about 2)"]
text = "\n".join(md) + "\n"
if markdown:
    with open(markdown, "w") as f:
        f.write(text)
    print(f"\nMarkdown written to {markdown}")
else:
    print("\n## Markdown\n")
    print(text, end="")
EOF
