#!/usr/bin/env bash
# Check a generated C++ API reference (Doxygen HTML): the index and the class
# list are there, the class list names each main public class of the API,
# each of them has its own page with a member list, and nothing of the
# private namespace remora::detail is shown.
#
# Usage: docs/check-reference.sh HTML_DIR
#   ctest runs it on BUILD/doc/html (doc.reference, label install);
#   scripts/install-check.sh on the installed share/doc/remora/html.
set -euo pipefail
html=${1:?usage: check-reference.sh HTML_DIR}
die() {
  echo "check-reference: FAIL: $*" >&2
  exit 1
}
[ -d "$html" ] || die "no directory $html (is doxygen installed and REMORA_DOCS on?)"
for f in index.html annotated.html namespaceremora.html; do
  [ -s "$html/$f" ] || die "$html/$f is missing or empty"
done
classes=(Fabric ProtectionZone MemoryRegion RemoteRegion Endpoint CompletionQueue Listener
  ConnectionRequest SharedReceiveQueue)
for c in "${classes[@]}"; do
  page=classremora_1_1$c.html
  grep -q "href=\"$page\"[^>]*>$c</a>" "$html/annotated.html" || die "the class list does not name remora::$c"
  [ -s "$html/$page" ] || die "no page for remora::$c ($page)"
  grep -q "remora::$c Class Reference" "$html/$page" || die "$page is not the reference of remora::$c"
  grep -q "Public Member Functions" "$html/$page" || die "$page lists no member functions"
done
# The /// comments made it into the pages (a sentence of protection_zone.hpp).
grep -q "A protection zone" "$html/classremora_1_1ProtectionZone.html" ||
  die "the page of remora::ProtectionZone lacks its description"
detail=$(find "$html" -maxdepth 1 -name '*1_1detail*' | head -n3)
[ -z "$detail" ] || die "pages of remora::detail are shown: $(echo "$detail" | tr '\n' ' ')"
n=$(find "$html" -maxdepth 1 \( -name 'class*.html' -o -name 'struct*.html' \) ! -name '*-members.html' | wc -l)
echo "check-reference: $html documents the ${#classes[@]} main classes ($n classes and structs in all)"
