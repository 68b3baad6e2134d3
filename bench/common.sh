# shellcheck shell=bash
# bench/common.sh: helpers the benchmark scripts share (compare.sh,
# samehost.sh, fio-latency.sh). Sourced, never run; needs python3.

# A TCP port on 127.0.0.1 that nobody uses now.
free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# True once something listens on 127.0.0.1:$1 (or the wildcard address).
listening() {
    python3 - "$1" <<'EOF'
import sys
port = int(sys.argv[1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        lines = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            sys.exit(0)
sys.exit(1)
EOF
}

# cpu_wrap OUT COMMAND...: runs COMMAND and writes to OUT the user and sys
# CPU seconds it and its descendants used (getrusage RUSAGE_CHILDREN, which
# counts timeout's child once both are waited for). SIGTERM and SIGINT are
# passed on to COMMAND. Use as: python3 -c "$CPU_WRAP" OUT COMMAND...
# shellcheck disable=SC2034 # used by the scripts that source this file
CPU_WRAP='import resource, signal, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, _f: p.send_signal(s))
rc = p.wait()
u = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    f.write(f"{u.ru_utime:.6f} {u.ru_stime:.6f}\n")
sys.exit(rc if rc >= 0 else 128 - rc)'
