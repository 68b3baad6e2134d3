#!/bin/sh
# Run the example pair over ofi-tcp-lo; bounded in time, cleans up.
set -u
bin="$1"
port=$((20000 + $$ % 20000))
"$bin" -s -P ofi-tcp-lo -p "$port" -n 200 &
srv=$!
trap 'kill "$srv" 2>/dev/null' EXIT INT TERM
timeout 60 "$bin" -h 127.0.0.1 -P ofi-tcp-lo -p "$port" -n 200
crc=$?
# the server exits once the client disconnected
i=0
while kill -0 "$srv" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 "$srv" 2>/dev/null; then echo "server did not exit"; exit 1; fi
wait "$srv"
src=$?
trap - EXIT
echo "client rc=$crc server rc=$src"
[ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
