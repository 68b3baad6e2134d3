#!/bin/bash
# The library exports exactly the names in libdat.map, under DAT_1.2.
set -eu
lib="$1"; map="$2"
want=$(sed -n 's/^ *\([A-Za-z_][A-Za-z_0-9]*\);$/\1/p' "$map" | sort)
have=$(nm -D --defined-only "$lib" | awk '$3 != "DAT_1.2" {print $3}' | sort)
bad=$(nm -D --defined-only "$lib" | awk '$3 != "DAT_1.2" {print $3}' | grep -v '@@DAT_1.2$' || true)
[ -z "$bad" ] || { echo "not under DAT_1.2: $bad"; exit 1; }
have=$(echo "$have" | sed 's/@@DAT_1.2$//')
[ "$want" = "$have" ] || { echo "export mismatch"; diff <(echo "$want") <(echo "$have") || true; exit 1; }
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libdat.so.1" ] || { echo "soname $soname"; exit 1; }
echo "check_symbols: $(echo "$want" | wc -l) symbols, soname $soname: ok"
