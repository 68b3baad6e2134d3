#!/bin/bash
# run.sh <bin-dir> [example...] - run every librpma example pair on 127.0.0.1.
# Each side is bounded by a timeout; the server is killed on any exit.
set -u
bin=${1:?usage: run.sh <bin-dir> [example...]}
shift
addr=127.0.0.1
examples=("$@")
if [ ${#examples[@]} -eq 0 ]; then
  examples=(01-connection 02-read-to-volatile 03-write-to-persistent 04-multiple-connections
            05-shared-completion-channel 06-atomic-write 07-messages-ping-pong
            08-messages-ping-pong-with-srq 09-send-with-imm 10-write-with-imm
            11-receive-completion-queue)
fi
work=$(mktemp -d)
spid=; wpid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
  [ -n "$wpid" ] && kill "$wpid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_one <name> [file]
run_one() {
  local ex=$1; shift
  local port=$(( 20000 + (RANDOM % 20000) ))
  local log=$work/$ex.server.log
  # $! must be the server itself (not a timeout wrapper) so kill -9 reaches
  # it; a watchdog bounds its life.
  "$bin/$ex-server" "$addr" "$port" "$@" >"$log" 2>&1 &
  spid=$!
  ( trap 'kill $w 2>/dev/null; exit 0' TERM; sleep 30 & w=$!; wait $w; kill -9 "$spid" 2>/dev/null ) >/dev/null 2>&1 &
  wpid=$!
  for _ in $(seq 1 100); do grep -q "listening" "$log" && break; sleep 0.05; done
  if ! grep -q "listening" "$log"; then
    echo "FAIL $ex: server did not start"; cat "$log"; kill -9 "$spid" 2>/dev/null; kill "$wpid" 2>/dev/null
    spid=; wpid=; return 1
  fi
  timeout -s KILL 20 "$bin/$ex-client" "$addr" "$port" "$@" >"$work/$ex.client.log" 2>&1
  local crc=$?
  [ $crc -ne 0 ] && kill -9 "$spid" 2>/dev/null
  wait "$spid"; local src=$?
  kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
  spid=; wpid=
  sed "s/^/  [server] /" "$log"; sed "s/^/  [client] /" "$work/$ex.client.log"
  if [ $crc -eq 0 ] && [ $src -eq 0 ]; then echo "PASS $ex $*"; return 0; fi
  echo "FAIL $ex $* (client rc=$crc, server rc=$src)"; return 1
}

failed=0
for ex in "${examples[@]}"; do
  case $ex in
    03-write-to-persistent|06-atomic-write)
      run_one "$ex" || failed=$((failed + 1))                    # volatile memory
      run_one "$ex" "$work/$ex.pmem" || failed=$((failed + 1))   # a file: persistent flushes
      ;;
    *) run_one "$ex" || failed=$((failed + 1)) ;;
  esac
done
echo "$failed failure(s)"
[ $failed -eq 0 ]
