#!/usr/bin/env bash
# compat/rpma/man/check-man.sh [BIN_DIR] - checks Remora's own man pages.
#
#   - every function librpma.map exports has its page compat/rpma/man/<f>.3,
#     and every page there is named after an exported function; the names in
#     a page's NAME line are exported functions, the first being its own;
#   - the SYNOPSIS of each page shows the prototype of librpma.h (compared
#     with whitespace normalised), so a header change shows up here;
#   - every rpma_*(3) page a page refers to exists;
#   - every page of compat/rpma/man and docs/man renders without a warning
#     (groff -man -ww, and man --warnings where man-db is installed);
#   - with BIN_DIR (ctest passes ${REMORA_BIN_DIR}): docs/man/remora-perf.1
#     and remora-info.1 name every option that `remora-perf --help` and
#     `remora-info --help` print, and the OPTIONS of each page lists only
#     options that --help prints.
#
# Needs groff (Debian: groff-base, pulled in by man-db) and python3.
# Exit status 0 when everything holds, 1 otherwise (each problem is printed).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin_dir=${1:-}
map=$root/compat/rpma/librpma.map
header=$root/compat/rpma/include/librpma.h
tool_man=$root/docs/man

fail=0
problem() {
  echo "check-man: $*" >&2
  fail=1
}

command -v groff >/dev/null || { echo "check-man: groff is missing (apt-get install groff-base)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "check-man: python3 is missing" >&2; exit 1; }

# Plain text of a page, as wide as needed, without overstriking.
render() { groff -man -Tascii -rLL=300n -P-cbou "$1" 2>/dev/null; }

# ---- librpma pages against librpma.map and librpma.h ---------------------------
mapfile -t funcs < <(sed -n 's/^[[:space:]]*\(rpma_[A-Za-z0-9_]*\);.*/\1/p' "$map" | sort)
[ "${#funcs[@]}" -gt 0 ] || problem "no functions found in $map"

for f in "${funcs[@]}"; do
  [ -f "$here/$f.3" ] || problem "$f is exported by librpma.map but has no page $f.3"
done
for page in "$here"/*.3; do
  [ -e "$page" ] || continue
  name=$(basename "$page" .3)
  grep -qx -- "$name" <<<"$(printf '%s\n' "${funcs[@]}")" || problem "$name.3: $name is not a function of librpma.map"
done
[ -f "$here/librpma.7" ] || problem "librpma.7 is missing"

python3 - "$here" "$map" "$header" <<'EOF' || fail=1
import glob, os, re, subprocess, sys

here, map_path, header = sys.argv[1:]
funcs = set(re.findall(r"^\s*(rpma_\w+);", open(map_path).read(), re.M))
hdr = re.sub(r"/\*.*?\*/", "", open(header).read(), flags=re.S)
bad = False

def norm(s):
    s = " ".join(s.split())
    return re.sub(r"\s*([(),;\[\]*])\s*", r"\1", s)

def complain(msg):
    global bad
    print("check-man: " + msg, file=sys.stderr)
    bad = True

for page in sorted(glob.glob(os.path.join(here, "*.3"))):
    name = os.path.basename(page)[:-2]
    src = open(page).read()
    # NAME line: "f1, f2 \- text"
    m = re.search(r"^\.SH NAME\n(.*?) \\- ", src, re.M)
    if not m:
        complain(name + ".3: no NAME line of the form 'name \\- description'")
    else:
        names = [n.strip() for n in m.group(1).split(",")]
        if names[0] != name:
            complain("%s.3: NAME starts with %s" % (name, names[0]))
        for n in names:
            if n not in funcs:
                complain("%s.3: NAME lists %s, which librpma.map does not export" % (name, n))
    # SYNOPSIS against the header's prototype
    if name in funcs:
        hm = re.search(r"(?:^|\n)([^\n;{}#]*?\b" + name + r"\([^;]*\);)", hdr)
        if not hm:
            complain(name + ": no prototype in librpma.h")
        else:
            text = subprocess.run(["groff", "-man", "-Tascii", "-rLL=300n", "-P-cbou", page],
                                  capture_output=True, text=True).stdout
            syn = text.split("SYNOPSIS", 1)[-1].split("DESCRIPTION", 1)[0]
            if norm(hm.group(1)) not in norm(syn):
                complain("%s.3: the SYNOPSIS does not show the prototype of librpma.h:\n    %s"
                         % (name, " ".join(hm.group(1).split())))
    # references to other librpma pages
    for ref in set(re.findall(r"(rpma_\w+)\s*\\fR\((\d)\)|\.BR (rpma_\w+) \((\d)\)", src)):
        r = ref[0] or ref[2]
        if r not in funcs:
            complain("%s.3: refers to %s(3), which is not a librpma function" % (name, r))

for page in [os.path.join(here, "librpma.7")]:
    if os.path.exists(page):
        for ref in set(re.findall(r"(rpma_\w+) \((\d)\)", open(page).read())):
            if ref[0] not in funcs:
                complain("librpma.7: refers to %s(3), which is not a librpma function" % ref[0])

sys.exit(1 if bad else 0)
EOF

# ---- every page renders without warnings -------------------------------------------
pages=("$here"/*.3 "$here"/*.7 "$tool_man"/*.1)
have_man=0
command -v man >/dev/null && have_man=1
for page in "${pages[@]}"; do
  [ -f "$page" ] || continue
  out=$(groff -man -ww -z "$page" 2>&1)
  [ -z "$out" ] || problem "$(basename "$page"): groff warns: $out"
  if [ "$have_man" = 1 ]; then
    out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
    [ -z "$out" ] || problem "$(basename "$page"): man --warnings: $out"
  fi
done
[ "$have_man" = 1 ] || echo "check-man: man is not installed; checked with groff only" >&2

# ---- tool pages against --help ---------------------------------------------------------
# Options a text names: --long ones, and single-letter ones standing alone.
options_of() { grep -oE '(^|[^A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9_-]*' | sed 's/^[^-]*//' |
  grep -E '^--[A-Za-z][A-Za-z0-9_-]*$|^-[A-Za-z]$' | sort -u; }

if [ -n "$bin_dir" ]; then
  for tool in remora-perf remora-info; do
    page=$tool_man/$tool.1
    if [ ! -f "$page" ]; then
      problem "$page is missing"
      continue
    fi
    if [ ! -x "$bin_dir/$tool" ]; then
      problem "$bin_dir/$tool is missing (build it, or run without BIN_DIR)"
      continue
    fi
    help=$("$bin_dir/$tool" --help 2>&1) || { problem "$tool --help failed"; continue; }
    text=$(render "$page")
    help_opts=$(options_of <<<"$help")
    page_opts=$(options_of <<<"$text")
    for o in $help_opts; do
      grep -qx -- "$o" <<<"$page_opts" || problem "$tool.1 does not mention $o, which '$tool --help' prints"
    done
    # The OPTIONS section: each tag line starts with the option.
    opts_section=$(awk '/^OPTIONS/{on=1;next} /^[A-Z]/{on=0} on' <<<"$text" |
      grep -E '^ {7}-' | options_of)
    # -h: tools/cli.hpp accepts it for --help without --help listing it.
    for o in $opts_section; do
      [ "$o" = -h ] && continue
      grep -qx -- "$o" <<<"$help_opts" || problem "$tool.1 documents $o under OPTIONS, which '$tool --help' does not print"
    done
  done
else
  echo "check-man: no BIN_DIR given; the tool pages were not compared with --help" >&2
fi

[ "$fail" = 0 ] && echo "check-man: ok (${#funcs[@]} librpma functions, $(ls "$here"/*.3 | wc -l) pages)"
exit "$fail"
