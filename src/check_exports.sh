#!/usr/bin/env bash
# Checks libremora.so.0: its soname, and that every symbol it exports belongs
# to the public API of include/remora/ (the classes and free functions that
# libremora.map lists), all under the version node REMORA_0.
# Usage: src/check_exports.sh path/to/libremora.so
set -euo pipefail
lib=${1:?usage: check_exports.sh LIBREMORA_SO}

soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libremora.so.0 ] || { echo "exports: soname is '$soname', want libremora.so.0" >&2; exit 1; }

public='^remora::(CompletionQueue|ConnectionRequest|Endpoint|Fabric|Listener|MemoryRegion|ProtectionZone|RemoteRegion|SharedReceiveQueue)::|^remora::(list_fabrics|remora_category|to_string)\('
syms=$(nm -DC --defined-only "$lib" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }')
n=$(printf '%s\n' "$syms" | grep -c . || true)
bad=$(printf '%s\n' "$syms" | grep -v '^REMORA_0$' | sed 's/@@REMORA_0$//' | grep -Ev "$public" || true)
if [ -n "$bad" ]; then
  echo "exports: symbols outside the public API:" >&2
  printf '  %s\n' "$bad" >&2
  exit 1
fi
unversioned=$(nm -D --defined-only "$lib" | awk '$3 !~ /@@REMORA_0$/ && $3 != "REMORA_0"' || true)
if [ -n "$unversioned" ]; then
  echo "exports: symbols without the REMORA_0 version:" >&2
  printf '  %s\n' "$unversioned" >&2
  exit 1
fi
for want in 'remora::Fabric::open(' 'remora::Endpoint::write(' 'remora::ProtectionZone::register_memory(' \
            'remora::remora_category()'; do
  printf '%s\n' "$syms" | grep -qF "$want" || { echo "exports: $want is missing" >&2; exit 1; }
done
echo "exports: $n symbols, all public, soname $soname"
