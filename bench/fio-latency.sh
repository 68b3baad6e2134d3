#!/usr/bin/env bash
# Latency of fio's librpma engines on Remora's librpma face: fio 3.33's
# librpma_apm_client (a 4 KiB write and a flush per I/O) or
# librpma_gpspm_client, at one I/O in flight, against the matching server on
# 127.0.0.1, run REPS times; prints fio's total latency percentiles (p50,
# p99, microseconds) and the client's CPU per I/O for each run and their
# medians.
#
#   bench/fio-latency.sh [--fio FIO] [--lib DIR] [--engine apm|gpspm]
#                        [--reps N] [--runtime S]
#
#   --fio     the fio binary built with the librpma engines; default: the one
#             compat/rpma/check-rpma.sh built from the fio mirror (its cache,
#             ${REMORA_UPSTREAM_CACHE:-/tmp/remora-upstream-cache}/fio-*/src/fio)
#   --lib     directory holding Remora's librpma.so.0 (default build/lib)
#
# fio's client polls rpma_cq_get_wc in a loop (it does not sleep on the
# completion channel); the server side of apm is passive (Remora's target
# agent serves it), the gpspm server busy-polls its receives.
#
# Client and server share this host, so by default their writes take the
# same-host direct path; REMORA_SAMEHOST=0 in the environment (both fio
# processes inherit it) measures the tcp transport instead.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIO=""
LIB=$ROOT/build/lib
ENGINE=apm
REPS=5
RUNTIME=3

die() { echo "fio-latency.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --fio) FIO=$2; shift 2 ;;
        --lib) LIB=$2; shift 2 ;;
        --engine) ENGINE=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ "$ENGINE" == apm || "$ENGINE" == gpspm ]] || die "--engine: apm or gpspm"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps: a positive number"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
FIO=$(fio_checked "$FIO" "$LIB") || exit 2

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
    [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

run_env=(env LD_LIBRARY_PATH="$LIB" PMEM_IS_PMEM_FORCE=1)
for ((rep = 1; rep <= REPS; rep++)); do
    port=$(free_port)
    extra=""
    [[ "$ENGINE" == gpspm ]] && extra=$'busy_wait_polling=1\niodepth=1\ntime_based\nruntime=365d'
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
size=1MiB
filename=malloc
$extra
EOF
    cat >"$WORK/client.fio" <<EOF
[global]
ioengine=librpma_${ENGINE}_client
create_serialize=0
serverip=127.0.0.1
port=$port
thread
lat_percentiles=1
[client]
numjobs=1
sync=1
iodepth=1
rw=write
blocksize=4k
time_based
runtime=${RUNTIME}s
EOF
    (cd "$WORK" && exec "${run_env[@]}" timeout -k 2 $((RUNTIME + 30)) "$FIO" server.fio) >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 100; i++)); do
        ss -ltn 2>/dev/null | grep -q ":$port " && break
        sleep 0.1
    done
    rc=0
    (cd "$WORK" && exec "${run_env[@]}" timeout -k 2 $((RUNTIME + 30)) "$FIO" --output-format=json \
        --output="$WORK/client.$rep.json" client.fio) >"$WORK/client.log" 2>&1 || rc=$?
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    [[ $rc -eq 0 ]] || { cat "$WORK/client.log" "$WORK/server.log" >&2; die "fio client exit $rc (run $rep)"; }
done

python3 - "$WORK" "$REPS" "$ENGINE" <<'EOF'
import json, statistics, sys
work, reps, engine = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
for rep in range(1, reps + 1):
    text = open(f"{work}/client.{rep}.json").read()
    job = json.loads(text[text.index("{"):])["jobs"][0]
    w = job["write"]
    pct = w["lat_ns"]["percentile"]
    ios = w["total_ios"]
    cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
    rows.append((pct["50.000000"] / 1000, pct["99.000000"] / 1000, w["iops"], cpu_s / ios * 1e6 if ios else 0))
print(f"fio librpma_{engine}_client, 4 KiB write + flush, iodepth 1, {reps} runs")
print(f"{'run':>4} {'lat p50 us':>11} {'lat p99 us':>11} {'IOPS':>9} {'client CPU us/IO':>17}")
for i, (p50, p99, iops, cpu) in enumerate(rows, 1):
    print(f"{i:>4} {p50:>11.1f} {p99:>11.1f} {iops:>9.0f} {cpu:>17.1f}")
med = [statistics.median(c) for c in zip(*rows)]
print(f"{'med':>4} {med[0]:>11.1f} {med[1]:>11.1f} {med[2]:>9.0f} {med[3]:>17.1f}")
EOF
