#!/usr/bin/env bash
# bench/cpu_step.sh: octet's CPU training step beside Hugging Face's (fp32 weights under bf16
# autocast, SDPA, fused AdamW) for the configs of docs/perf/cpu-step.md, each in one
# bench/step_compare.py run (both sides under the same machine load), the bf16 GEMM rate of
# `octet bench gemm` timed in the first run. `make bench-step` builds octet and the venv first.
#   bench/cpu_step.sh OCTET PYTHON_WITH_TORCH [SEQ [REPS]]   (SEQ default: 256; REPS default 1:
#   with more, each side runs REPS times in turn and each row is its fastest call)
set -euo pipefail
octet=${1:?usage: bench/cpu_step.sh OCTET PYTHON [SEQ [REPS]]}
python=${2:?usage: bench/cpu_step.sh OCTET PYTHON [SEQ [REPS]]}
seqs=${3:-256}
reps=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
compare=("$python" "$here/step_compare.py" --octet "$octet" --python "$python" --device cpu
         --hf-weights amp --warmup 2 --steps 5 --reps "$reps")
echo "== $(date -u '+%F %T') UTC, $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores"
"${compare[@]}" --gemm --model "$here/cpu_w256.json" --batch 8 --seq "$seqs"
"${compare[@]}" --model tiny --batch 8 --seq "$seqs"
"${compare[@]}" --model small --batch 4 --seq "$seqs"
