#!/usr/bin/env bash
# Write bandwidth of fio's librpma engines (apm or gpspm) on Remora's librpma face, on
# one host, with same-host regions moved into huge pages (Remora's default)
# and left in 4 KiB pages (REMORA_HUGEPAGES=0), interleaved: for each
# repetition and block size, one run of each. fio 3.33's
# librpma server registers a workspace it took from posix_memalign and
# never wrote (filename=malloc), so its pages are only touched by the
# client's writes; the client writes it in turn (rw=write) at --iodepth.
# Prints, per run and as medians: the client's bandwidth, its CPU per I/O,
# and how much of the server's memory was in huge pages near the end of the
# run (AnonHugePages of its /proc/PID/smaps_rollup).
#
#   bench/fio-bandwidth.sh [--fio FIO] [--lib DIR] [--engine apm|gpspm]
#                          [--bs LIST] [--iodepth N] [--batch N]
#                          [--size BYTES] [--reps N] [--runtime S]
#
#   --fio      the fio binary built with the librpma engines; default: the
#              one compat/rpma/check-rpma.sh built from the fio mirror (its
#              cache, ${REMORA_UPSTREAM_CACHE:-/tmp/remora-upstream-cache})
#   --lib      directory holding Remora's librpma.so.0 (default build/lib)
#   --engine   apm (default: the client writes, then flushes by an RDMA
#              read-after-write) or gpspm (the client writes, then sends a
#              flush request that the server, busy-polling, answers)
#   --bs       block sizes, comma-separated, fio's syntax (default 64k,1m)
#   --iodepth  I/Os in flight (default 16)
#   --batch    fio's iodepth_batch_submit: I/Os queued before the engine
#              posts them (its writes, then one flush for a sequence of
#              them; default 1, fio's default: a write and a flush each)
#   --size     the server's workspace, fio's syntax (default 64MiB)
#   --reps     repetitions (default 3)
#   --runtime  seconds of one client run (default 5)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIO=""
LIB=$ROOT/build/lib
ENGINE=apm
BS=64k,1m
IODEPTH=16
BATCH=1
SIZE=64MiB
REPS=3
RUNTIME=5

die() { echo "fio-bandwidth.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 || "$1" == -h || "$1" == --help ]] || die "$1 needs a value"
    case "$1" in
        --fio) FIO=$2; shift 2 ;;
        --lib) LIB=$2; shift 2 ;;
        --engine) ENGINE=$2; shift 2 ;;
        --bs) BS=$2; shift 2 ;;
        --iodepth) IODEPTH=$2; shift 2 ;;
        --batch) BATCH=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ "$ENGINE" == apm || "$ENGINE" == gpspm ]] || die "--engine: apm or gpspm"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps: a positive number"
[[ "$IODEPTH" =~ ^[1-9][0-9]*$ ]] || die "--iodepth: a positive number"
[[ "$BATCH" =~ ^[1-9][0-9]*$ ]] || die "--batch: a positive number"
[[ "$RUNTIME" =~ ^[1-9][0-9]*$ ]] || die "--runtime: a whole number of seconds, at least 1"
[[ "$BS" =~ ^[0-9]+[kKmM]?(,[0-9]+[kKmM]?)*$ ]] || die "--bs: sizes like 64k,1m"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
FIO=$(fio_checked "$FIO" "$LIB") || exit 2

WORK=$(mktemp -d)
SERVER_PID=""
CLIENT_PID=""
cleanup() {
    for p in "$CLIENT_PID" "$SERVER_PID"; do
        [[ -n "$p" ]] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# huge_kib PID: the AnonHugePages (KiB) of PID's child (fio under timeout).
huge_kib() {
    local child
    child=$(pgrep -P "$1" | head -1 || true)
    [[ -n "$child" ]] || { echo -1; return; }
    awk '/^AnonHugePages:/ { print $2; found = 1 } END { if (!found) print -1 }' \
        "/proc/$child/smaps_rollup" 2>/dev/null || echo -1
}

IFS=, read -r -a sizes <<<"$BS"
: >"$WORK/runs"
for ((rep = 1; rep <= REPS; rep++)); do
    for bs in "${sizes[@]}"; do
        for huge in 1 0; do
            port=$(free_port)
            server_extra=""
            # The gpspm server busy-polls for flush requests, as many in
            # flight as the client's I/Os, until the client leaves.
            [[ $ENGINE == gpspm ]] &&
                server_extra=$'busy_wait_polling=1\n'"iodepth=$IODEPTH"$'\ntime_based\nruntime=365d'
            cat >"$WORK/server.fio" <<EOF
[global]
ioengine=librpma_${ENGINE}_server
create_serialize=0
kb_base=1000
serverip=127.0.0.1
port=$port
thread
[server]
direct_write_to_pmem=0
numjobs=1
size=$SIZE
filename=malloc
$server_extra
EOF
            cat >"$WORK/client.fio" <<EOF
[global]
ioengine=librpma_${ENGINE}_client
create_serialize=0
serverip=127.0.0.1
port=$port
thread
[client]
numjobs=1
iodepth=$IODEPTH
iodepth_batch_submit=$BATCH
rw=write
blocksize=$bs
time_based
runtime=${RUNTIME}s
EOF
            run_env=(env LD_LIBRARY_PATH="$LIB" REMORA_HUGEPAGES="$huge")
            (cd "$WORK" && exec "${run_env[@]}" timeout -k 2 $((RUNTIME + 30)) "$FIO" server.fio) \
                >"$WORK/server.log" 2>&1 &
            SERVER_PID=$!
            for ((i = 0; i < 100; i++)); do
                listening "$port" && break
                sleep 0.1
            done
            (cd "$WORK" && exec "${run_env[@]}" timeout -k 2 $((RUNTIME + 30)) "$FIO" --output-format=json \
                --output="$WORK/client.json" client.fio) >"$WORK/client.log" 2>&1 &
            CLIENT_PID=$!
            sleep $((RUNTIME - 1)).5
            kib=$(huge_kib "$SERVER_PID")
            rc=0
            wait "$CLIENT_PID" || rc=$?
            CLIENT_PID=""
            wait "$SERVER_PID" 2>/dev/null || true
            SERVER_PID=""
            [[ $rc -eq 0 ]] || { cat "$WORK/client.log" "$WORK/server.log" >&2; die "fio client exit $rc"; }
            python3 - "$WORK/client.json" "$bs" "$huge" "$kib" "$rep" >>"$WORK/runs" <<'EOF'
import json, sys
path, bs, huge, kib, rep = sys.argv[1:]
text = open(path).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
w = job["write"]
ios = w["total_ios"]
if job["error"] != 0 or ios == 0:
    sys.exit(f"fio-bandwidth.sh: the client's job failed (error {job['error']}, {ios} I/Os)")
cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
print(rep, bs, huge, w["bw_bytes"] / 1e9, cpu_s / ios * 1e6, int(kib) / 1024)
EOF
        done
    done
done

python3 - "$WORK/runs" "$REPS" "$IODEPTH" "$SIZE" "$RUNTIME" "$BATCH" "$ENGINE" <<'EOF'
import statistics, sys
path, reps, qd, size, runtime, batch, engine = sys.argv[1:]
rows = [l.split() for l in open(path)]
print(f"fio librpma_{engine}_client rw=write, iodepth {qd}, iodepth_batch_submit {batch}, server workspace {size} (malloc, untouched), "
      f"{runtime} s per run, {reps} repetitions, interleaved")
print(f"{'rep':>4} {'bs':>5} {'huge pages':>10} {'GB/s':>7} {'CPU us/IO':>10} {'server MiB huge':>16}")
for r in rows:
    print(f"{r[0]:>4} {r[1]:>5} {'on' if r[2] == '1' else 'off':>10} {float(r[3]):>7.2f} {float(r[4]):>10.2f} "
          f"{float(r[5]):>16.0f}")
print("medians:")
for bs in dict.fromkeys(r[1] for r in rows):
    med = {}
    for huge in ("1", "0"):
        sel = [r for r in rows if r[1] == bs and r[2] == huge]
        med[huge] = [statistics.median(float(r[i]) for r in sel) for i in (3, 4, 5)]
    on, off = med["1"], med["0"]
    print(f"  bs {bs}: on {on[0]:.2f} GB/s, {on[1]:.2f} CPU us/IO, {on[2]:.0f} MiB huge; "
          f"off {off[0]:.2f} GB/s, {off[1]:.2f} CPU us/IO; on/off {on[0] / off[0]:.2f}x bandwidth, "
          f"{off[1] / on[1]:.2f}x less CPU per I/O")
EOF
