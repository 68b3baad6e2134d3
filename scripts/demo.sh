#!/usr/bin/env bash
# The main demo: a client writes into a file-backed region of a server over
# tcp on 127.0.0.1, flushes it to persistence, and the server shows the bytes
# it finds in the file.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
echo "demo: write + persistent flush into a file, client and server on 127.0.0.1"
bash examples/run.sh "$build/bin" 03
