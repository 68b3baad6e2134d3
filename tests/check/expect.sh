#!/usr/bin/env bash
# tests/check/expect.sh - run one remora-check program and assert its report.
#
#   expect.sh [options] -- command [args...]
#
#   --exit N              the program's exit status must be N
#   --grep REGEX          a line of stderr must match REGEX (extended regex; {HEX},
#                         {NUM} and {RB} stand for 0x[0-9a-f]+, [0-9]+ and \], which
#                         CMake's lists would mangle)
#   --count N             exactly N findings (stderr lines and summary)
#   --json                write the JSON report (REMORA_CHECK_REPORT) and check it
#                         lists as many findings as stderr, each with its fields
#   --image-has F O TEXT  crash image F (in the run's directory) holds TEXT at offset O
#   --image-lacks F O TEXT  ... does not hold it
#   --no-image F          crash image F was not written
#
# "@DIR@" in the command is replaced by a fresh directory, removed at the end.
set -u
exit_want=0 count_want='' json=0
greps=() has=() lacks=() noimg=()
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --exit) exit_want=$2; shift 2 ;;
    --grep)
      g=${2//\{HEX\}/0x[0-9a-f]+}
      g=${g//\{NUM\}/[0-9]+}
      greps+=("${g//\{RB\}/\\]}")
      shift 2 ;;
    --count) count_want=$2; shift 2 ;;
    --json) json=1; shift ;;
    --image-has) has+=("$2|$3|$4"); shift 4 ;;
    --image-lacks) lacks+=("$2|$3|$4"); shift 4 ;;
    --no-image) noimg+=("$2"); shift 2 ;;
    *) echo "expect.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
shift
dir=$(mktemp -d /tmp/remora-check.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cmd=()
for a in "$@"; do cmd+=("${a//@DIR@/$dir}"); done
export REMORA_CHECK="${REMORA_CHECK:-}"
REMORA_CHECK="${REMORA_CHECK//@DIR@/$dir}"
[[ $json == 1 ]] && export REMORA_CHECK_REPORT="$dir/report.json"

timeout -k 5 60 "${cmd[@]}" 2>"$dir/stderr"
rc=$?
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
echo "--- stderr of: ${cmd[*]} (REMORA_CHECK=$REMORA_CHECK)"
cat "$dir/stderr"
echo "---"
[[ $rc == "$exit_want" ]] || bad "exit status $rc, expected $exit_want"
# The programs say they got to their end (remora-check forces the status
# when it found something, whatever the program's own).
grep -q '^check-program: done$' "$dir/stderr" || bad "the program did not get to its end"
for g in "${greps[@]}"; do
  grep -Eq -- "$g" "$dir/stderr" || bad "no stderr line matches: $g"
done
lines=$(grep -c '^remora-check: [a-z]*: ' "$dir/stderr" | tr -d ' ')
lines=$((lines - $(grep -c '^remora-check: summary: ' "$dir/stderr")))
grep -q '^remora-check: summary: ' "$dir/stderr" || bad "no summary line"
if [[ -n $count_want ]]; then
  [[ $lines == "$count_want" ]] || bad "$lines findings on stderr, expected $count_want"
  grep -Eq "^remora-check: summary: $count_want finding" "$dir/stderr" || bad "summary does not say $count_want"
fi
if [[ $json == 1 ]]; then
  python3 - "$dir/report.json" "$lines" <<'EOF' || bad "JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert len(r["findings"]) == n, (len(r["findings"]), n)
assert r["summary"]["findings"] == n
for f in r["findings"]:
    for k in ("check", "kind", "message", "cookie", "endpoint", "region", "offset", "length"):
        assert k in f, k
print("JSON report: %d findings" % n)
EOF
fi
image_text() { dd if="$dir/$1" bs=1 skip="$2" count="${#3}" 2>/dev/null; }
for x in "${has[@]}"; do
  IFS='|' read -r f o t <<<"$x"
  [[ -f $dir/$f ]] || { bad "no crash image $f"; continue; }
  [[ "$(image_text "$f" "$o" "$t")" == "$t" ]] || bad "crash image $f lacks '$t' at $o"
done
for x in "${lacks[@]}"; do
  IFS='|' read -r f o t <<<"$x"
  [[ -f $dir/$f ]] || { bad "no crash image $f"; continue; }
  [[ "$(image_text "$f" "$o" "$t")" != "$t" ]] || bad "crash image $f holds '$t' at $o"
done
for f in "${noimg[@]}"; do
  [[ ! -e $dir/$f ]] || bad "crash image $f exists"
done
[[ $fail == 0 ]] && echo PASS
exit $fail
