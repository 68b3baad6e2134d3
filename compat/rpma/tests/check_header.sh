#!/bin/bash
# check_header.sh <our-include-dir> [debian-header] - our librpma.h against
# Debian's: every function prototype (re-declared from Debian's header after
# including ours must compile), every macro value and every enumerator value.
set -eu
inc=$1; deb=${2:-/usr/include/librpma.h}
[ -f "$deb" ] || { echo "no $deb: skipped"; exit 0; }
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 0; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cc=${CC:-cc}
# 1. prototypes
"$cc" -E -P "$deb" | python3 -c '
import re, sys
out = ["#include <librpma.h>"]
n = 0
for part in sys.stdin.read().split(";"):
    p = part.split("}")[-1].strip()
    if re.match(r"^(int|const char \*)\s*rpma_\w+\s*\(", p) or p.startswith("typedef void rpma_log_function"):
        out.append(p + ";"); n += 1
out.append("int main(void){return 0;}")
open(sys.argv[1], "w").write("\n".join(out))
print(n, "declarations")
' "$w/redecl.c"
"$cc" -std=gnu11 -Wall -Werror -I"$inc" -c "$w/redecl.c" -o "$w/redecl.o"
# 2. macro and enumerator values
{
  echo '#include <librpma.h>'; echo '#include <stdio.h>'; echo 'int main(void) {'
  grep -oE '#define[[:space:]]+RPMA_[A-Z0-9_]+' "$deb" | awk '{print $2}' | sort -u |
    grep -v -e '^RPMA_LOG_USE_DEFAULT_FUNCTION$' | sed 's/.*/printf("&=%ld\\n", (long)(&));/'
  "$cc" -E -P "$deb" | grep -oE '^[[:space:]]*RPMA_[A-Z0-9_]+' | tr -d ' \t' | sort -u |
    sed 's/.*/printf("&=%ld\\n", (long)(&));/'
  echo 'printf("sizes %zu %zu\\n", sizeof(struct rpma_conn_private_data), sizeof(enum rpma_conn_event));'
  echo 'return 0; }'
} > "$w/values.c"
"$cc" -I"$inc" "$w/values.c" -o "$w/ours"
"$cc" "$w/values.c" -o "$w/deb"
"$w/ours" > "$w/ours.txt"; "$w/deb" > "$w/deb.txt"
diff "$w/deb.txt" "$w/ours.txt"
echo "prototypes agree; $(wc -l < "$w/ours.txt") values identical"
