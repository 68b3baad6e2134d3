#!/usr/bin/env bash
# examples/run.sh [BIN_DIR] [NN ...] - run the numbered examples end to end
# on 127.0.0.1 and print one line per example. Exit status 1 if any failed.
#
#   BIN_DIR  where remora-exNN-{client,server} are (default: build/bin)
#   NN       examples to run, e.g. 02 05 (default: all of examples/NN-*)
#
# For each example: start the server in the background on port 0 (the kernel
# picks a free port; the server prints it once it listens), run the client
# against it, wait for the server, check both exit codes and cross-check
# what each side printed. Every program is bounded by `timeout 30`.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$here/../build/bin
if [[ $# -gt 0 && ! $1 =~ ^[0-9][0-9]$ ]]; then
  bin=$1
  shift
fi
if [[ ! -d $bin ]]; then
  echo "run.sh: no directory $bin: build first or pass BIN_DIR" >&2
  exit 2
fi
if [[ $# -eq 0 ]]; then
  for dir in "$here"/[0-9][0-9]-*/; do
    [[ -d $dir ]] && set -- "$@" "$(basename "$dir" | cut -c1-2)"
  done
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/remora-examples.XXXXXX") || exit 2
server_pid='' client_pid=''
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill "$pid" 2>/dev/null  # timeout passes the signal on to the program
    wait "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# after FILE PREFIX: the rest of the first line of FILE that starts with PREFIX.
after() { sed -n "s#^$2##p" "$1" | head -n 1; }
# capture FILE REGEX: \1 of the first line of FILE that REGEX matches whole.
capture() { sed -n "s#^$2\$#\1#p" "$1" | head -n 1; }

status_text() {
  case $1 in
    0) echo "ok" ;;
    124) echo "timed out" ;;
    *) echo "exit status $1" ;;
  esac
}

# run_one NN: run example NN; print its line; return non-zero on failure.
run_one() {
  local nn=$1 name="" dir
  for dir in "$here/$nn"-*/; do
    [[ -d $dir ]] && name=$(basename "$dir") && break
  done
  if [[ -z $name ]]; then
    echo "$nn: FAILED: no example $nn in $here"
    return 1
  fi
  local server=$bin/remora-ex$nn-server client=$bin/remora-ex$nn-client
  if [[ ! -x $server || ! -x $client ]]; then
    echo "$name: FAILED: $server or $client is missing"
    return 1
  fi
  local out=$work/$name
  mkdir -p "$out"
  local slog=$out/server.log clog=$out/client.log
  local extra=()
  [[ $nn == 03 ]] && extra=("$out/remora-03.dat")  # not the shared default file

  timeout 30 "$server" 127.0.0.1 0 "${extra[@]}" >"$slog" 2>&1 &
  server_pid=$!
  local port="" i
  for ((i = 0; i < 100; i++)); do
    port=$(after "$slog" 'server: listening on .*:')
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done

  local crc=-1 src why=""
  if [[ -n $port ]]; then
    # In the background so that `wait` (unlike a foreground command) lets a
    # signal's trap run at once.
    timeout 30 "$client" 127.0.0.1 "$port" >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid"
    crc=$?
    client_pid=
  else
    why="the server never listened"
    kill "$server_pid" 2>/dev/null
  fi
  wait "$server_pid"
  src=$?
  server_pid=

  if [[ -z $why ]] && ((crc != 0 || src != 0)); then
    why="client $(status_text "$crc"), server $(status_text "$src")"
  fi

  # What happened, from what the two sides printed; any disagreement fails.
  local what=""
  if [[ -z $why ]]; then
    case $nn in
      01)
        local sent answer said event
        sent=$(after "$clog" 'client: sent ')
        answer=$(after "$clog" 'client: server answered ')
        said=$(after "$slog" 'server: client says ')
        event=$(after "$slog" 'server: event: ')
        [[ -n $sent && $sent == "$said" ]] || why="the server heard $said, the client sent $sent"
        what="client sent $sent, server answered $answer, server saw '$event'"
        ;;
      02)
        local wrote held
        wrote=$(capture "$clog" 'client: wrote \("[^"]*"\).*')
        held=$(after "$slog" 'server: buffer holds ')
        [[ -n $wrote && $wrote == "$held" ]] || why="the server's buffer holds $held, the client wrote $wrote"
        what="wrote $wrote to the server and read it back"
        ;;
      03)
        local wrote held
        wrote=$(capture "$clog" 'client: wrote \("[^"]*"\).*')
        held=$(after "$slog" 'server: .* holds ')
        [[ -n $wrote && $wrote == "$held" ]] || why="the server's file holds $held, the client wrote $wrote"
        what="wrote $wrote and flushed it persistent; the server's file holds it after disconnect"
        ;;
      04)
        local records used sused lines
        records=$(capture "$clog" 'client: appended \([0-9]*\) records.*')
        used=$(after "$clog" 'client: appended [0-9]* records, used = ')
        sused=$(capture "$slog" 'server: log used = \([0-9]*\) bytes:')
        lines=$(grep -c '^record ' "$slog")
        [[ -n $used && $used == "$sused" && $records == "$lines" ]] ||
          why="the server's log has used = $sused and $lines records, the client appended $records records, used = $used"
        what="appended $records records (write, fenced atomic_write of the counter, flush); the server's log shows used = $sused"
        ;;
      05)
        local rounds answered
        rounds=$(capture "$clog" 'client: \([0-9]*\) rounds.*')
        answered=$(grep -c '^server: got "ping' "$slog")
        [[ -n $rounds && $rounds == "$answered" ]] || why="the client did $rounds rounds, the server answered $answered"
        what="$rounds rounds of ping-pong with send/recv"
        ;;
      06)
        local wrote imm simm held
        wrote=$(capture "$clog" 'client: wrote \("[^"]*"\).*')
        imm=$(after "$clog" 'client: wrote .* with immediate ')
        simm=$(after "$slog" 'server: recv_write_imm completion, immediate ')
        held=$(after "$slog" 'server: buffer holds ')
        [[ -n $imm && $imm == "$simm" && -n $wrote && $wrote == "$held" ]] ||
          why="the server got immediate $simm and holds $held, the client wrote $wrote with $imm"
        what="wrote $wrote with immediate $imm; the server got a recv_write_imm completion with $simm"
        ;;
      *) what="client and server finished" ;;
    esac
  fi

  if [[ -n $why ]]; then
    echo "$name: FAILED: $why"
    local f
    for f in "$slog" "$clog"; do
      [[ -s $f ]] && sed "s/^/    [$(basename "$f" .log)] /" "$f"
    done
    return 1
  fi
  echo "$name: $what: OK"
}

failed=0
for nn in "$@"; do
  run_one "$nn" || failed=1
done
exit $failed
