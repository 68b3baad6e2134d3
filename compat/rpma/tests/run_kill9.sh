#!/bin/bash
# run_kill9.sh <pmem_server> <pmem_client> - persistent flush over tcp on
# 127.0.0.1: after the client's flush completion the server is killed with
# kill -9, then the file must hold the flushed bytes. Before the kill, the
# server's mapping of the file must have no dirty pages left (the flush
# wrote them back).
set -u
server=$1; client=$2
addr=127.0.0.1
port=$(( 20000 + (RANDOM % 20000) ))
dir=$(mktemp -d)
file=$dir/pmem.bin
spid=; wpid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
  [ -n "$wpid" ] && kill "$wpid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# $! is the server itself (no wrapper), so kill -9 reaches it; a watchdog
# bounds its life.
"$server" "$addr" "$port" "$file" >"$dir/server.log" 2>&1 &
spid=$!
( trap 'kill $w 2>/dev/null; exit 0' TERM; sleep 40 & w=$!; wait $w; kill -9 "$spid" 2>/dev/null ) >/dev/null 2>&1 &
wpid=$!
for _ in $(seq 1 100); do grep -q READY "$dir/server.log" && break; sleep 0.05; done
grep -q READY "$dir/server.log" || { echo "server did not start"; cat "$dir/server.log"; exit 1; }
timeout -s KILL 20 "$client" "$addr" "$port" "$file" | tee "$dir/client.log"
crc=${PIPESTATUS[0]}
grep -q FLUSHED "$dir/client.log" || { echo "no flush completion (client rc=$crc)"; cat "$dir/server.log"; exit 1; }
# dirty pages of the server's mapping of the file (smaps: Shared_Dirty + Private_Dirty)
dirty=$(awk -v f="$file" '$0 ~ /^[0-9a-f]+-[0-9a-f]+ / {m = ($NF == f)} m && /_Dirty:/ {d += $2} END {print d + 0}' "/proc/$spid/smaps")
echo "dirty kB in the server's mapping after the flush: $dirty"
kill -9 "$spid"
wait "$spid" 2>/dev/null
echo "server (pid $spid) killed with SIGKILL"
spid=
[ "$dirty" -eq 0 ] || { echo "flushed pages are still dirty"; exit 1; }
"$client" --verify "$file"
