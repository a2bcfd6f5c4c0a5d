#!/usr/bin/env bash
# Runs each libFuzzer harness of BUILD/fuzz for SECONDS, seeded from fuzz/corpus/<name> (kept
# small in the repo); what it finds grows BUILD/fuzz-corpus/<name>. A crash, leak, timeout or
# sanitizer report fails the run and leaves its input in BUILD/fuzz-artifacts/. Prints one
# line per harness: executions, seconds, corpus size.
#   scripts/fuzz.sh BUILD SECONDS [HARNESS...]   (default: every harness)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD SECONDS [HARNESS...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD SECONDS [HARNESS...]}
shift 2
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then harnesses=(safetensors json config shard trainer_state cli); fi
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for h in "${harnesses[@]}"; do
  corpus="$build/fuzz-corpus/$h"
  mkdir -p "$corpus"
  log="$build/fuzz-logs/$h.log"
  start=$(date +%s)
  status=0
  "$build/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$h-" \
    "$corpus" "fuzz/corpus/$h" >"$log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  printf 'fuzz %-14s %10s execs %5ss  corpus %4s inputs  %s\n' "$h" "$execs" "$elapsed" \
    "$(ls "$corpus" | wc -l)" "$([ $status -eq 0 ] && echo ok || echo "FAILED (see $log)")"
  if [ $status -ne 0 ]; then
    failed+=("$h")
    grep -m 20 -E 'ERROR|runtime error|SUMMARY|Test unit written|uncaught|deadly' "$log" || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
