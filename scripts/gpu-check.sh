#!/usr/bin/env bash
# scripts/gpu-check.sh OUTDIR [STAGE...]: everything a machine with a GPU can check, in one run
# or in stages (tests, sanitize, cpu, probes, bench, step, train; none named: all of them, in
# that order, about 25 minutes on an H100); every stage builds first (a no-op once built), so a
# lease of 10-minute calls runs, for example, `tests sanitize`, then `probes bench`, then `step`,
# then `train`, each into its own OUTDIR (scripts/gpu-lease.sh does that inside a time budget
# and packs the folders for the device tool). In all, it
# configures and builds octet with CUDA in its own build folder (Release, ninja), runs the
# GPU tests (ctest -L gpu), the GPU tests once more under compute-sanitizer's memcheck,
# racecheck and synccheck (with OCTET_CUDA_SYNC=1, so a fault names its kernel), and the
# CPU tests (ctest -L cpu), then the GPU benchmarks
# (bench gemm, quantize, attention and step, each beside torch / Hugging Face where they are
# installed) and 500 steps of the ~1B model in bf16 and fp8, writing every log and
# JSON file into OUTDIR, with a summary in OUTDIR/summary.txt. Exits non-zero if the build,
# a GPU test, a sanitizer run or a CPU test fails, or if no GPU is visible (the GPU tests would only be
# skipped); benchmark failures are reported as warnings.
#
# Needs no network and no system packages beyond CUDA, CMake, Ninja, a compiler and the two
# header-only libraries nlohmann-json (>= 3.10) and CLI11 (>= 2.1) (Debian nlohmann-json3-dev,
# libcli11-dev; CMAKE_PREFIX_PATH may point at copies, which scripts/gpu-carry.sh makes):
# GoogleTest is built from /usr/src/googletest when find_package(GTest) finds none
# (tests/CMakeLists.txt).
# Environment: OCTET_GPU_BUILD_DIR (default build-gpu), OCTET_GPU_JOBS (default nproc),
# OCTET_BENCH_MAX_SIZE (default 16384), PYTHON (default python3), OCTET_GTEST_SOURCE_DIR (a
# googletest checkout where the machine has none in /usr/src/googletest), OCTET_TRAIN_STEPS
# (default 500).
set -uo pipefail

all_stages=(tests sanitize cpu probes bench step train)
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [${all_stages[*]}]" >&2
  exit 2
fi
out=$1
shift
stages=("$@")
((${#stages[@]})) || stages=("${all_stages[@]}")
for s in "${stages[@]}"; do
  [[ " ${all_stages[*]} " == *" $s "* ]] || {
    echo "$0: unknown stage '$s' (expected some of: ${all_stages[*]})" >&2
    exit 2
  }
done
# wants STAGE: whether this run includes STAGE.
wants() { [[ " ${stages[*]} " == *" $1 "* ]]; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OCTET_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${OCTET_GPU_JOBS:-$(nproc)}
max_size=${OCTET_BENCH_MAX_SIZE:-16384}
python=${PYTHON:-python3}
summary=$out/summary.txt
: >"$summary"
status=0

note() { echo "$*" | tee -a "$summary"; }
# step NAME LOG CMD...: runs CMD with its output in OUTDIR/LOG, notes how it ended, and
# leaves its exit code in $rc.
step() {
  local name=$1 log=$2
  shift 2
  local start=$SECONDS
  echo "== $name (log: $out/$log)"
  "$@" >"$out/$log" 2>&1
  rc=$?
  note "$(printf '%-28s exit %3d  %5ds  %s' "$name" "$rc" $((SECONDS - start)) "$log")"
}

note "octet gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) in $root ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'no git')), stages: ${stages[*]}"
{ nvidia-smi || echo "nvidia-smi failed"; nvcc --version || echo "no nvcc on PATH"; } >"$out/machine.txt" 2>&1

# ---- build ----
# The Python oracle tests run with the repository's venv where scripts/setup.sh made one,
# else with the system python (they report "skipped" when a reference package is missing).
venv_python=$root/.venv/bin/python
[[ -x $venv_python ]] || venv_python=$(command -v "$python" || echo "$venv_python")
gtest_flag=()
[[ -n ${OCTET_GTEST_SOURCE_DIR:-} ]] && gtest_flag=(-DOCTET_GTEST_SOURCE_DIR="$OCTET_GTEST_SOURCE_DIR")
step configure configure.log cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DOCTET_CUDA=ON -DOCTET_PYTHON="$venv_python" "${gtest_flag[@]}"
if [[ $rc -ne 0 ]]; then
  note "FAIL: configure failed"
  exit 1
fi
if ! grep -Eq "octet: .*\bCUDA=ON" "$out/configure.log"; then
  note "FAIL: CMake found no CUDA compiler (see configure.log): put nvcc on PATH or set CUDACXX"
  exit 1
fi
step build build.log cmake --build "$build" -j "$jobs"
if [[ $rc -ne 0 ]]; then
  note "FAIL: build failed (tail of build.log below)"
  tail -n 40 "$out/build.log" | tee -a "$summary"
  exit 1
fi
"$build/octet" --version | tee -a "$summary"
if ! "$build/octet" --version | grep -Eq "CUDA built in, [1-9][0-9]* GPU"; then
  note "FAIL: no GPU visible to octet: the GPU tests would only be skipped"
  exit 1
fi

# ---- tests ----
if wants tests; then
  step "ctest -L gpu" ctest-gpu.log ctest --test-dir "$build" -L gpu --output-on-failure \
    --output-junit "$out/ctest-gpu.xml"
  [[ $rc -ne 0 ]] && status=1 && note "FAIL: GPU tests failed (ctest-gpu.log)"
  grep -E "tests passed|Not Run|Skipped|Failed" "$out/ctest-gpu.log" | tail -n 20 >>"$summary"
  if grep -q "Skipped" "$out/ctest-gpu.log"; then
    note "WARNING: some GPU tests were skipped (see ctest-gpu.log)"
  fi
  # The FP8 GEMM tests once more with every scale grid through the exact emulation
  # (dequantize, then a bf16/f32 GEMM) instead of cuBLASLt's scaled kernels: a cross-check
  # of both paths, and the fallback OCTET_CUDA_FP8_EMULATE=1 offers where cuBLASLt refuses one.
  step "fp8 gemm, emulated" gtest-fp8-emulated.log env OCTET_CUDA_FP8_EMULATE=1 \
    "$build/tests/octet_tests" --gtest_filter='*ScaledGemmOnDevice*/cuda:*GemmOnDevice.Fp8*/cuda'
  [[ $rc -ne 0 ]] && status=1 && note "FAIL: FP8 GEMM tests through the emulation failed (gtest-fp8-emulated.log)"
fi
if wants sanitize; then
  # The GPU tests under compute-sanitizer: memcheck (out-of-bounds and misaligned accesses,
  # leaks of device memory), racecheck (shared-memory hazards between threads of a block)
  # and synccheck (barriers not reached by every thread, bad masks of warp collectives).
  # Each tool reports through its exit code (--error-exitcode). Skipped, loudly, where the
  # toolkit has no compute-sanitizer.
  sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  if [[ -x $sanitizer ]]; then
    for tool in memcheck racecheck synccheck; do
      # racecheck runs the kernel tests only: the two end-to-end CudaTraining tests run the
      # same kernels and take minutes under it (45 s for the shorter one on an H100).
      filter='*/cuda:Cuda*'
      [[ $tool == racecheck ]] && filter='*/cuda:Cuda*-CudaTraining.*'
      step "compute-sanitizer $tool" "sanitizer-$tool.log" env OCTET_CUDA_SYNC=1 "$sanitizer" \
        --tool "$tool" --error-exitcode 99 --print-limit 50 \
        "$build/tests/octet_tests" --gtest_filter="$filter"
      [[ $rc -ne 0 ]] && status=1 && note "FAIL: compute-sanitizer $tool reported errors (sanitizer-$tool.log)"
    done
  else
    note "WARNING: compute-sanitizer not found (looked for $sanitizer): memcheck, racecheck and synccheck not run"
  fi
fi
if wants cpu; then
  step "ctest -L cpu" ctest-cpu.log ctest --test-dir "$build" -L cpu -j "$jobs" --output-on-failure \
    --output-junit "$out/ctest-cpu.xml"
  [[ $rc -ne 0 ]] && status=1 && note "FAIL: CPU tests failed (ctest-cpu.log)"
  grep -E "tests passed" "$out/ctest-cpu.log" >>"$summary"
fi

# ---- probes: what the cuBLASLt and the tensor cores at hand do (docs/perf/gpu-h100.md) ----
if wants probes; then
  step "probe cuBLASLt FP8 build" probe-cublaslt-build.log nvcc \
    -gencode=arch=compute_90a,code=sm_90a -o "$build/probe_cublaslt_fp8" \
    "$root/scripts/probe_cublaslt_fp8.cu" -lcublasLt
  if [[ $rc -eq 0 ]]; then
    step "probe cuBLASLt FP8 shapes" probe-cublaslt-fp8.txt "$build/probe_cublaslt_fp8"
    note "$(grep -c 'matmul=0' "$out/probe-cublaslt-fp8.txt") FP8 problems ran, $(grep -vc 'matmul=0' "$out/probe-cublaslt-fp8.txt") lines refused or other"
  fi
  step "probe FP8 accumulator" probe-fp8-accumulator.txt "$python" "$root/scripts/probe_fp8_accumulator.py"
  [[ $rc -ne 0 ]] && note "WARNING: probe_fp8_accumulator.py failed (probe-fp8-accumulator.txt)"
fi

# ---- benchmarks ----
if wants bench; then
  step "bench gemm (cuda)" bench-gemm.txt "$build/octet" bench gemm --device cuda \
    --max-size "$max_size" --json "$out/bench-gemm.jsonl"
  [[ $rc -ne 0 ]] && note "WARNING: octet bench gemm reported failures (bench-gemm.txt)"
  if [[ ! -s $out/bench-gemm.jsonl ]]; then
    note "skipped: gemm compare (octet bench gemm wrote no JSON)"
  elif command -v "$python" >/dev/null 2>&1; then
    # Reuses the octet numbers above; torch_gemm.py exits 77 (skipped) without torch.
    step "gemm compare (torch)" gemm-compare.txt "$python" "$root/bench/gemm_compare.py" \
      --octet "$build/octet" --octet-json "$out/bench-gemm.jsonl" --json "$out/gemm-compare.json" \
      --workdir "$out"
    [[ $rc -ne 0 && $rc -ne 77 ]] && note "WARNING: gemm_compare.py failed (gemm-compare.txt)"
  else
    note "skipped: gemm compare ($python not found)"
  fi
  # The FP8 quantization kernels against the card's copy bandwidth.
  step "bench quantize (cuda)" bench-quantize.txt "$build/octet" bench quantize --device cuda \
    --json "$out/bench-quantize.jsonl"
  [[ $rc -ne 0 ]] && note "WARNING: octet bench quantize reported failures (bench-quantize.txt)"
  # Causal GQA attention, ours beside torch's scaled_dot_product_attention.
  step "bench attention (cuda)" bench-attention.txt "$build/octet" bench attention --device cuda \
    --json "$out/bench-attention.jsonl"
  [[ $rc -ne 0 ]] && note "WARNING: octet bench attention reported failures (bench-attention.txt)"
  if [[ -s $out/bench-attention.jsonl ]]; then
    step "attention compare (torch)" attention-compare.txt "$python" "$root/bench/torch_attention.py" \
      --ours "$out/bench-attention.jsonl" --json "$out/attention-compare.jsonl"
    [[ $rc -ne 0 && $rc -ne 77 ]] && note "WARNING: torch_attention.py failed (attention-compare.txt)"
  fi
fi
if wants step; then
  # Whole training steps, bf16 vs fp8, beside Hugging Face's LlamaForCausalLM where torch and
  # transformers are installed: the ~1B model at seq 2048 and the 7B shape with 8 layers.
  export OCTET_BUILD_DIR=$build
  step "step compare 1b" step-1b.txt "$python" "$root/bench/step_compare.py" --octet "$build/octet" \
    --model 1b --batch 4 --seq 2048 --recipe tensor-current,tensor-delayed --check
  [[ $rc -ne 0 ]] && note "WARNING: the 1b step comparison missed a target or failed (step-1b.txt)"
  # fp8's peak memory without the guard's bf16 twin (a second whole model; docs/perf/gpu-h100.md).
  step "step compare 1b, no twin" step-1b-no-guard.txt "$python" "$root/bench/step_compare.py" \
    --octet "$build/octet" --model 1b --batch 4 --seq 2048 --recipe tensor-current --no-hf \
    --no-guard --warmup 2 --steps 5
  step "step compare 7b x8 layers" step-7b.txt "$python" "$root/bench/step_compare.py" \
    --octet "$build/octet" --model 7b --layers 8 --batch 2 --seq 4096 --check
  [[ $rc -ne 0 ]] && note "WARNING: the 7b-shaped step comparison missed a target or failed (step-7b.txt)"
  step "bench step sweep" bench-step-sweep.txt "$build/octet" bench step --device cuda --sweep \
    --warmup 2 --steps 5
  [[ $rc -ne 0 ]] && note "WARNING: octet bench step --sweep reported failures (bench-step-sweep.txt)"
fi
# OCTET_TRAIN_STEPS (500) steps of the ~1B model on the synthetic corpus in bf16 and fp8: the
# final validation losses must end within 1% of each other (issue 6).
train_steps=${OCTET_TRAIN_STEPS:-500}
if wants train; then
  for precision in bf16 fp8; do
    step "train 1b $precision x$train_steps" "train-1b-$precision.txt" "$build/octet" train \
      --device cuda --model 1b --precision "$precision" --batch 4 --seq-len 2048 \
      --steps "$train_steps" --warmup 50 --train-tokens 8388608 --lr 3e-4 --eval-every 100 \
      --log-every 50 --metrics "$out/train-1b-$precision.jsonl"
    [[ $rc -ne 0 ]] && status=1 && note "FAIL: octet train 1b $precision failed (train-1b-$precision.txt)"
  done
fi
if wants train && [[ -s $out/train-1b-bf16.jsonl && -s $out/train-1b-fp8.jsonl ]]; then
  "$python" - "$out/train-1b-bf16.jsonl" "$out/train-1b-fp8.jsonl" "$train_steps" <<'PY' | tee -a "$summary"
import json, sys
last = [[json.loads(l) for l in open(p) if '"val_loss"' in l][-1]["val_loss"] for p in sys.argv[1:3]]
gap = abs(last[1] - last[0]) / last[0]
print(f"1b x{sys.argv[3]} val_loss: bf16 {last[0]:.4f}, fp8 {last[1]:.4f}, gap {100 * gap:.2f}% "
      f"({'within' if gap <= 0.01 else 'NOT within'} 1%)")
PY
fi

note "gpu-check: $([[ $status -eq 0 ]] && echo PASSED || echo FAILED); logs and JSON in $out"
exit $status
