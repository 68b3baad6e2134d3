#!/usr/bin/env bash
# bench/ab-perf.sh: two builds of Remora measured against each other with
# remora-perf, in the same minutes: for each repetition and case, one run of
# each build (the order alternating between repetitions), a server and a
# client of the same build on 127.0.0.1 (the same-host path unless the
# environment turns it off). Prints, per case, the median bandwidth of each
# build with its range, the CPU time per operation of both processes (user
# + sys over their whole lives, divided by the operations of warm-up and
# run), and the ratio after/before.
#
#   bench/ab-perf.sh --before DIR --after DIR [--reps N] [--case SPEC]...
#
#   --before, --after  build directories (each holding bin/remora-perf)
#   --reps N           repetitions (default 5)
#   --case SPEC        NAME|OP|SIZE|ITERS|SERVER FLAGS|CLIENT FLAGS, qd 16
#                      unless the client flags say otherwise; repeatable.
#                      Default: 64 KiB and 1 MiB writes into the server's
#                      buffer, and 64 KiB writes walking a 64 MiB target
#                      (--target-span 64m).
#
# Exit status: 0 when every run gave a figure, 1 when a run failed (its
# output is shown), 2 for bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh

die() { echo "ab-perf.sh: $*" >&2; exit 2; }
BEFORE="" AFTER="" REPS=5 CASES=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --before) [[ $# -ge 2 ]] || die "--before needs a build directory"; BEFORE=$2; shift 2 ;;
        --after) [[ $# -ge 2 ]] || die "--after needs a build directory"; AFTER=$2; shift 2 ;;
        --reps) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--reps needs a positive number"; REPS=$2; shift 2 ;;
        --case) [[ $# -ge 2 ]] || die "--case needs NAME|OP|SIZE|ITERS|SERVER FLAGS|CLIENT FLAGS"; CASES+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ -n $BEFORE && -n $AFTER ]] || die "--before and --after are both needed"
for d in "$BEFORE" "$AFTER"; do
    [[ -x $d/bin/remora-perf ]] || die "$d/bin/remora-perf not found (build it: make -C $d remora-perf)"
done
if [[ ${#CASES[@]} -eq 0 ]]; then
    CASES=("write 64K|write|65536|60000||" "write 64K, 64 MiB target|write|65536|60000|--target-span 64m|"
           "write 1M|write|1048576|4000||")
fi
for c in "${CASES[@]}"; do
    IFS='|' read -r _ op size iters _ _ <<<"$c"
    [[ -n $op && $size =~ ^[0-9]+$ && $iters =~ ^[0-9]+$ ]] || die "bad --case '$c'"
done

WORK=$(mktemp -d)
PIDS=()   # every background process started (timeout wrappers)
SERVER_TIMEOUT=300
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run WHICH TAG OP SIZE ITERS "SERVER FLAGS" "CLIENT FLAGS": a server and a
# client of build WHICH; the client's JSON and both processes' CPU seconds
# (CPU_WRAP) in $WORK/TAG.*. False when a side failed.
run() {
    local which=$1 tag=$2 op=$3 size=$4 iters=$5 sflags=$6 cflags=$7 perf rc=0
    perf=$([[ $which == before ]] && echo "$BEFORE" || echo "$AFTER")/bin/remora-perf
    PORT=$(free_port)
    # shellcheck disable=SC2086  # flags are words on purpose
    if ! start_server "$WORK/$tag.slog" python3 -c "$CPU_WRAP" "$WORK/$tag.scpu" "$perf" --server --port "$PORT" \
            --address 127.0.0.1 --provider tcp $sflags; then
        echo "ab-perf.sh: $tag: the server did not start" >&2
        cat "$WORK/$tag.slog" >&2
        stop_server
        return 1
    fi
    [[ $cflags == *--qd* ]] || cflags="$cflags --qd 16"
    # shellcheck disable=SC2086
    bounded 180 python3 -c "$CPU_WRAP" "$WORK/$tag.ccpu" "$perf" --client 127.0.0.1 --port "$PORT" --provider tcp \
        --op "$op" --size "$size" --iters "$iters" --json $cflags </dev/null >"$WORK/$tag.json" 2>"$WORK/$tag.err" || rc=$?
    stop_server
    if ((rc != 0)) || [[ ! -s $WORK/$tag.scpu ]]; then
        echo "ab-perf.sh: $tag failed (client exit $rc)" >&2
        cat "$WORK/$tag.err" "$WORK/$tag.slog" >&2
        return 1
    fi
}

FAILED=0
for ((rep = 1; rep <= REPS; rep++)); do
    order=(before after)
    ((rep % 2 == 0)) && order=(after before)
    for ci in "${!CASES[@]}"; do
        IFS='|' read -r name op size iters sflags cflags <<<"${CASES[$ci]}"
        for which in "${order[@]}"; do
            echo "ab-perf.sh: rep $rep/$REPS $name: $which" >&2
            run "$which" "$which.$rep.$ci" "$op" "$size" "$iters" "$sflags" "$cflags" || FAILED=1
        done
    done
done

python3 - "$WORK" "$REPS" "${CASES[@]}" <<'EOF'
import json, os, statistics, sys

work, reps, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def cpu(path):
    u, s = open(path).read().split()
    return float(u) + float(s)

print("| case | before GB/s | range | CPU us/op | after GB/s | range | CPU us/op | after/before |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for ci, spec in enumerate(cases):
    name, _op, _size, iters = spec.split("|")[:4]
    row, med = [name], {}
    for which in ("before", "after"):
        runs = []
        for rep in range(1, reps + 1):
            base = os.path.join(work, f"{which}.{rep}.{ci}")
            try:
                d = json.loads(open(base + ".json").read().strip().splitlines()[-1])
                ops = int(iters) + int(d["settings"].get("warmup_iters") or 0)
                runs.append((d["gbps"], (cpu(base + ".scpu") + cpu(base + ".ccpu")) / ops * 1e6))
            except (OSError, ValueError, KeyError, IndexError):
                pass
        if not runs:
            row += ["-", "-", "-"]
            continue
        med[which] = statistics.median(r[0] for r in runs)
        row += [f"{med[which]:.2f}", f"{min(r[0] for r in runs):.2f}-{max(r[0] for r in runs):.2f}",
                f"{statistics.median(r[1] for r in runs):.1f}"]
    row.append(f"{med['after'] / med['before']:.2f}x" if len(med) == 2 and med["before"] > 0 else "-")
    print("| " + " | ".join(row) + " |")
print(f"\nmedians of {reps} repetitions, the two builds interleaved; CPU us/op: user + sys of server and client "
      "over their whole lives, per operation of warm-up and run")
EOF
exit "$FAILED"
