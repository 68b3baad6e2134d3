#!/usr/bin/env bash
# Acceptance test of the C faces with programs written by others, built
# unchanged from git mirrors (never copied into this repository):
#   librpma face: compat/rpma/check-rpma.sh RPMA_MIRROR FIO_MIRROR BUILD_DIR
#                 (librpma 1.2.0's examples, fio 3.33's librpma engines)
#   uDAPL face:   BUILD_DIR=... compat/dat/check-dapl.sh DAPL_MIRROR
#                 (compat-dapl 1.2's dtest and dapltest), if that script exists
#
# Usage: compat/check-upstream.sh [--rpma RPMA_MIRROR] [--fio FIO_MIRROR]
#                                 [--dapl DAPL_MIRROR] [--build BUILD_DIR]
#                                 [--transports LIST]
# A mirror is a git directory (bare, or a work tree's .git) as `fetch` makes
# them; the defaults are where `fetch` puts them:
#   /work/.mirror/pmem+rpma/repo, /work/.mirror/axboe+fio/repo,
#   /work/.mirror/eurolinux-enterprise-linux-sources+compat-dapl/repo/.git
# BUILD_DIR (default: build) is a configured and built Remora tree.
# LIST (default: direct,tcp) says which of Remora's transports the programs
# run on, each face once per transport: `direct`, the same-host direct path
# (REMORA_SAMEHOST=1, the default between processes of one host), and
# `tcp`, libfabric tcp on 127.0.0.1 (REMORA_SAMEHOST=0).
#
# Prints each face's PASS/FAIL lines, then a summary: one line per face and
# an overall "N passed, M failed". A face whose script ends without its
# "N passed, M failed" line counts as one failure. Exit status 0 only if
# nothing failed.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

mirrors=${REMORA_MIRRORS:-/work/.mirror}
rpma=$mirrors/pmem+rpma/repo
fio=$mirrors/axboe+fio/repo
dapl=$mirrors/eurolinux-enterprise-linux-sources+compat-dapl/repo/.git
build=$repo/build
transports=direct,tcp

usage() {
  echo "usage: $0 [--rpma RPMA_MIRROR] [--fio FIO_MIRROR] [--dapl DAPL_MIRROR] [--build BUILD_DIR]" \
    "[--transports direct,tcp]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --rpma)  [ $# -ge 2 ] || usage; rpma=$2; shift 2 ;;
    --fio)   [ $# -ge 2 ] || usage; fio=$2; shift 2 ;;
    --dapl)  [ $# -ge 2 ] || usage; dapl=$2; shift 2 ;;
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    --transports) [ $# -ge 2 ] || usage; transports=$2; shift 2 ;;
    -h|--help) usage ;;
    *) usage ;;
  esac
done

total_pass=0; total_fail=0
summary=()

# run_face NAME SCRIPT ARGS...: run, show its output, add up its last line
run_face() {
  local name=$1 script=$2; shift 2
  echo "=== $name: $script $*"
  local out rc
  out=$(mktemp)
  bash "$script" "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  local line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
  if [ -n "$line" ]; then
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
    if [ "$f" = 0 ] && [ "$rc" != 0 ]; then
      echo "FAIL $name: the script exited $rc"; f=1
    fi
  else
    echo "FAIL $name: the script (exit $rc) printed no \"N passed, M failed\" line"
    p=0; f=1
  fi
  rm -f "$out"
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  summary+=("$(printf '%-15s %s passed, %s failed' "$name:" "$p" "$f")")
  echo
}

IFS=, read -r -a transport_list <<<"$transports"
[ ${#transport_list[@]} -gt 0 ] || usage
for t in "${transport_list[@]}"; do
  case $t in direct|tcp) ;; *) echo "--transports: direct or tcp, not '$t'" >&2; usage ;; esac
done

for t in "${transport_list[@]}"; do
  samehost=1; [ "$t" = tcp ] && samehost=0
  export REMORA_SAMEHOST=$samehost
  run_face "librpma/$t" "$here/rpma/check-rpma.sh" "$rpma" "$fio" "$build"

  if [ -f "$here/dat/check-dapl.sh" ]; then
    # check-dapl.sh takes the build tree from $BUILD_DIR (its usage line:
    # MIRROR_GIT_DIR [REF]); pass it positionally too if it ever asks for that
    if grep -Eq 'usage: .*MIRROR[A-Z_]* +\[?BUILD_DIR' "$here/dat/check-dapl.sh"; then
      BUILD_DIR=$build run_face "uDAPL/$t" "$here/dat/check-dapl.sh" "$dapl" "$build"
    else
      BUILD_DIR=$build run_face "uDAPL/$t" "$here/dat/check-dapl.sh" "$dapl"
    fi
  else
    summary+=("uDAPL/$t: not run (compat/dat/check-dapl.sh absent)")
  fi
done
unset REMORA_SAMEHOST

echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
