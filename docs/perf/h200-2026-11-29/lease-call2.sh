#!/usr/bin/env bash
# One device call: build + GPU tests (gpu-check.sh tests), the 1B step beside HF with and
# without the guard's twin, memcheck and synccheck; everything tarred into $OUT/lease.tgz.
set -u
export PATH=/usr/local/cuda/bin:$PATH CMAKE_PREFIX_PATH=$PWD/.gpudeps \
  OCTET_GTEST_SOURCE_DIR=$PWD/.gpudeps/googletest PYTHONUNBUFFERED=1
o=/tmp/o; mkdir -p $o; t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a $o/lease.txt; }
pack() { tar czf $OUT/lease.tgz -C /tmp o; cp $o/lease.txt $OUT/ 2>/dev/null; }
trap pack EXIT
{ nvidia-smi; nvcc --version; cmake --version; lscpu | head -20; } >$o/machine.txt 2>&1
log "start $(git rev-parse --short HEAD 2>/dev/null)"
timeout 215 scripts/gpu-check.sh $o/t tests >$o/t.txt 2>&1; log "gpu-check tests rc=$?"
cat $o/t/summary.txt >>$o/lease.txt; pack
b=build-gpu/octet
if [[ -x $b ]]; then
  timeout 170 python3 bench/step_compare.py --octet $b --model 1b --batch 4 --seq 2048 \
    --recipe tensor-current --warmup 2 --steps 5 >$o/step-1b.txt 2>&1
  log "step 1b rc=$?"; tail -n 25 $o/step-1b.txt >>$o/lease.txt; pack
  timeout 70 python3 bench/step_compare.py --octet $b --model 1b --batch 4 --seq 2048 \
    --recipe tensor-current --no-hf --no-guard --warmup 2 --steps 5 >$o/step-1b-noguard.txt 2>&1
  log "step 1b no guard rc=$?"; tail -n 15 $o/step-1b-noguard.txt >>$o/lease.txt; pack
  for tool in memcheck synccheck; do
    left=$((560 - (SECONDS - t0)))
    ((left > 30)) || { log "no time for $tool"; continue; }
    lim=$((left < 95 ? left : 95))
    OCTET_CUDA_SYNC=1 timeout $lim compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 50 \
      build-gpu/tests/octet_tests --gtest_filter='*/cuda:Cuda*' >$o/sanitizer-$tool.txt 2>&1
    log "$tool rc=$? (limit ${lim}s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/sanitizer-$tool.txt | tail -n 5 >>$o/lease.txt
  done
fi
log end
