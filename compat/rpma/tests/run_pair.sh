#!/bin/bash
# run_pair.sh <server> <client> [extra args] - run a server/client pair on
# 127.0.0.1 with a free port; every process is bounded in time and cleaned up.
set -u
server=$1; client=$2; shift 2
addr=127.0.0.1
port=$(( 20000 + (RANDOM % 20000) ))
out=$(mktemp)
spid=; wpid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
  [ -n "$wpid" ] && kill "$wpid" 2>/dev/null
  rm -f "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$server" "$addr" "$port" "$@" >"$out" 2>&1 &
spid=$!
( trap 'kill $w 2>/dev/null; exit 0' TERM; sleep 30 & w=$!; wait $w; kill -9 "$spid" 2>/dev/null ) >/dev/null 2>&1 &
wpid=$!
for _ in $(seq 1 100); do grep -q READY "$out" && break; sleep 0.05; done
grep -q READY "$out" || { echo "server did not start"; cat "$out"; exit 1; }
timeout -s KILL 20 "$client" "$addr" "$port" "$@"; crc=$?
[ "$crc" -ne 0 ] && kill -9 "$spid" 2>/dev/null
wait "$spid"; src=$?
spid=
cat "$out"
echo "client rc=$crc server rc=$src"
[ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
