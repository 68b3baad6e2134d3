#!/bin/bash
# check_symbols.sh <librpma.so> <map> - the library exports exactly the
# functions the map lists, each under the LIBRPMA_1.0 version node.
set -eu
lib=$1; map=$2
want=$(grep -oE 'rpma_[a-z0-9_]+' "$map" | sort)
have=$(objdump -T "$lib" | awk '$2 ~ /g/ && $4 == ".text" {print $6" "$7}' | sort)
names=$(echo "$have" | awk '{print $2}' | sort)
versions=$(echo "$have" | awk '{print $1}' | sort -u)
n=$(echo "$want" | wc -l)
[ "$n" -eq 84 ] || { echo "map lists $n functions, not 84"; exit 1; }
diff <(echo "$want") <(echo "$names") || { echo "exported functions differ from the map"; exit 1; }
[ "$versions" = "LIBRPMA_1.0" ] || { echo "unexpected version nodes: $versions"; exit 1; }
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "librpma.so.0" ] || { echo "soname $soname"; exit 1; }
echo "84 functions under LIBRPMA_1.0, soname $soname"
