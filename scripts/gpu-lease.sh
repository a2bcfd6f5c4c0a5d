#!/usr/bin/env bash
# scripts/gpu-lease.sh SECONDS STAGE...: scripts/gpu-check.sh's stages (tests, sanitize, cpu,
# probes, bench, step, train) one after another on a lent GPU machine, inside a time budget of
# SECONDS, each into its own folder, and everything they wrote packed into $OUT/gpu-check.tgz
# with the last stage's summary beside it (the device tool returns at most 8 files from $OUT).
# A stage that would outrun the budget is stopped, so the pack is always written: give the
# device call a timeout_s some 30 s above SECONDS. With .gpudeps/ (scripts/gpu-carry.sh) named
# in the call's `carry`, its libraries are used. For example, as one device call:
#   scripts/gpu-lease.sh 540 tests sanitize
set -u
if [[ $# -lt 2 ]]; then
  echo "usage: $0 SECONDS STAGE..." >&2
  exit 2
fi
budget=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gpu-lease-out}
work=$(mktemp -d /tmp/gpu-lease.XXXXXX)
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
if [[ -d $root/.gpudeps ]]; then
  export CMAKE_PREFIX_PATH=$root/.gpudeps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export OCTET_GTEST_SOURCE_DIR=${OCTET_GTEST_SOURCE_DIR:-$root/.gpudeps/googletest}
fi
pack() {
  tar czf "$out/gpu-check.tgz" -C "$work" .
  [[ -f $work/lease.txt ]] && cp "$work/lease.txt" "$out/"
}
trap pack EXIT
start=$SECONDS
status=0
for stage in "$@"; do
  left=$((budget - (SECONDS - start) - 10))
  if ((left < 30)); then
    echo "[$((SECONDS - start))s] $stage: not run, ${left}s left of the budget" >>"$work/lease.txt"
    status=1
    continue
  fi
  timeout "$left" "$root/scripts/gpu-check.sh" "$work/$stage" "$stage" >"$work/$stage.log" 2>&1
  rc=$?
  ((rc == 124)) && note=" (stopped at the budget)" || note=""
  echo "[$((SECONDS - start))s] $stage: exit $rc$note" >>"$work/lease.txt"
  cat "$work/$stage/summary.txt" >>"$work/lease.txt" 2>/dev/null
  ((rc != 0)) && status=1
done
cat "$work/lease.txt"
exit $status
