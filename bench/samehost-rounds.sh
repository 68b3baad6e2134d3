#!/usr/bin/env bash
# bench/samehost-rounds.sh: the same-host rows of issue 10 at one write
# size, in interleaved rounds, for the rows whose figure swings from run to
# run on a shared machine. Each round measures, within a few seconds:
#
#   1. remora-bench-samehost --only memcpy,cma,cma-pair,libfabric-shm at
#      --size (single-thread memcpy; one process_vm_writev stream; the same
#      split over two processes with nothing else, the ceiling of cross-
#      memory attach; libfabric shm, delivery-complete and default);
#   2. remora-perf writes of --size at qd 16 into the server's heap buffer
#      (the same-host direct path: cross-memory attach) and into a buffer
#      its zone allocated (--shared-target: a copy through a mapping), in
#      alternating order from round to round.
#
# Prints one line per round (GB/s, the Remora rows' client CPU per write and
# the host's CPU time stolen during each, in percent) and the medians and
# ranges of the rows and of their ratios: Remora's cross-memory row to shm
# and to cma-pair, cma-pair to shm, the mapped row to memcpy.
#
#   bench/samehost-rounds.sh [--build DIR] [--rounds N] [--size BYTES]
#                            [--writes N]
#
#   --build DIR   the build directory with bin/remora-bench-samehost and
#                 bin/remora-perf (default build, relative to the repository)
#   --rounds N    rounds (default 10)
#   --size BYTES  the write size (k, m suffixes; default 64k)
#   --writes N    writes per remora-perf run (default: 6.5 GB of them, at
#                 most 200,000)
#
# Exit status: 0 when every run gave a figure, 1 when one failed (its
# output is shown), 2 for bad arguments.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=build
ROUNDS=10
SIZE_TEXT=64k
WRITES=""
STEP_TIMEOUT=120     # seconds, one client run
SERVER_TIMEOUT=150   # seconds, one server (it leaves when its client is done)

die() { echo "samehost-rounds.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build) [[ $# -ge 2 ]] || die "--build needs a directory"
                 BUILD=$2; shift 2 ;;
        --rounds) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive number"
                  ROUNDS=$2; shift 2 ;;
        --size) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*[km]?$ ]] || die "--size needs a size (64k, say)"
                SIZE_TEXT=$2; shift 2 ;;
        --writes) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--writes needs a positive number"
                  WRITES=$2; shift 2 ;;
        -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
samehost_tools || exit 2
case $SIZE_TEXT in
    *k) SIZE=$((${SIZE_TEXT%k} * 1024)) ;;
    *m) SIZE=$((${SIZE_TEXT%m} * 1024 * 1024)) ;;
    *) SIZE=$SIZE_TEXT ;;
esac
if [[ -z "$WRITES" ]]; then
    WRITES=$((6500000000 / SIZE))
    ((WRITES > 200000)) && WRITES=200000
    ((WRITES < 1000)) && WRITES=1000
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/remora-rounds.XXXXXX")
PIDS=()   # every background process started (timeout wrappers)
kill_started_on_exit

# remora_run OUT [SERVER FLAG]: one same-host server and client; the
# client's JSON line in OUT.
remora_run() {
    local out=$1 flag=${2:-}
    PORT=$(free_port)
    # shellcheck disable=SC2086  # the flag is a word or nothing
    if ! start_server "$out.server.log" env REMORA_SAMEHOST=1 "$PERF" --server --port "$PORT" \
            --address 127.0.0.1 --provider tcp $flag; then
        cat "$out.server.log" >&2; stop_server; return 1
    fi
    if ! bounded "$STEP_TIMEOUT" env REMORA_SAMEHOST=1 "$PERF" --client 127.0.0.1 --port "$PORT" --provider tcp \
            --op write --size "$SIZE" --iters "$WRITES" --json </dev/null >"$out" 2>"$out.err"; then
        cat "$out.err" "$out.server.log" >&2; stop_server; return 1
    fi
    stop_server
}

echo "samehost-rounds.sh: $ROUNDS rounds of $SIZE-byte writes ($WRITES per remora-perf run)" >&2
for ((r = 1; r <= ROUNDS; r++)); do
    if ! bounded "$STEP_TIMEOUT" "$SAMEHOST" --only memcpy,cma,cma-pair,libfabric-shm --size "$SIZE" \
            --reps 1 -D 0.5 --json </dev/null >"$WORK/samehost.$r" 2>"$WORK/samehost.$r.err"; then
        cat "$WORK/samehost.$r.err" >&2
        exit 1
    fi
    if ((r % 2)); then
        remora_run "$WORK/direct.$r" || exit 1
        remora_run "$WORK/mapped.$r" --shared-target || exit 1
    else
        remora_run "$WORK/mapped.$r" --shared-target || exit 1
        remora_run "$WORK/direct.$r" || exit 1
    fi
done

python3 - "$WORK" "$ROUNDS" "$SIZE" <<'EOF'
import json, os, statistics, sys

work, rounds, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def first_json(path):
    for line in open(path):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"no result in {path}")

NAMES = [("memcpy", None), ("cma", None), ("cma-pair", None), ("libfabric-shm", "delivery"), ("libfabric-shm", "default")]
COLS = ["memcpy", "cma", "cma-pair", "shm-deliv", "shm-def", "direct", "mapped"]
per = []
for r in range(1, rounds + 1):
    got = {}
    for line in open(os.path.join(work, f"samehost.{r}")):
        if not line.startswith("{"):
            continue
        o = json.loads(line)
        if o.get("size") != size or o.get("op") not in ("copy", "write"):
            continue
        for i, (engine, completion) in enumerate(NAMES):
            if o["engine"] == engine and o.get("completion") == completion:
                got[COLS[i]] = (o["gbps"], None, o.get("steal_pct"))
    for name in ("direct", "mapped"):
        o = first_json(os.path.join(work, f"{name}.{r}"))
        got[name] = (o["gbps"], o["cpu_us_per_op"], o.get("steal_pct"))
    missing = [c for c in COLS if c not in got]
    if missing:
        sys.exit(f"round {r}: no figure for {', '.join(missing)} (an engine this machine refused?)")
    per.append(got)

def steal(v):
    return "-" if v is None else f"{v:.1f}"

print(f"{'round':>5} " + " ".join(f"{c:>9}" for c in COLS) +
      "  direct CPU us/op, steal %  mapped CPU us/op, steal %  samehost steal %")
for r, got in enumerate(per, 1):
    print(f"{r:>5} " + " ".join(f"{got[c][0]:9.2f}" for c in COLS) +
          f"  {got['direct'][1]:8.2f} {steal(got['direct'][2]):>6}" +
          f"  {got['mapped'][1]:15.2f} {steal(got['mapped'][2]):>6}" +
          f"  {steal(max((got[c][2] or 0) for c in COLS[:5])):>16}")

def summary(name, values, unit=""):
    values = list(values)
    print(f"{name:<28} median {statistics.median(values):7.2f}{unit}  range {min(values):.2f}-{max(values):.2f}{unit}")

print()
for c in COLS:
    summary(c + " GB/s", (g[c][0] for g in per))
ratios = [("direct / shm delivery", "direct", "shm-deliv"), ("direct / shm default", "direct", "shm-def"),
          ("direct / cma-pair", "direct", "cma-pair"), ("cma-pair / shm default", "cma-pair", "shm-def"),
          ("mapped / memcpy", "mapped", "memcpy")]
for name, a, b in ratios:
    summary(name, (g[a][0] / g[b][0] for g in per), "x")
print(f"rounds with direct under 1.5x shm (delivery / default): "
      f"{sum(g['direct'][0] < 1.5 * g['shm-deliv'][0] for g in per)} / "
      f"{sum(g['direct'][0] < 1.5 * g['shm-def'][0] for g in per)} of {len(per)}; "
      f"mapped under 0.75x memcpy: {sum(g['mapped'][0] < 0.75 * g['memcpy'][0] for g in per)}, "
      f"under 25 GB/s: {sum(g['mapped'][0] < 25 for g in per)}")
EOF
