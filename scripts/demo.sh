#!/usr/bin/env bash
# The main job of `make demo`: trains the tiny LLaMA on the synthetic Markov corpus on
# the CPU twice, in bf16 and in fp8 (default recipe), and prints both final validation
# losses next to the corpus' entropy floor.
set -euo pipefail
octet=${1:-build/octet}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {
  "$octet" train --model tiny --markov-vocab 64 --precision "$1" --steps 400 --lr 1e-2 \
    --warmup 20 --eval-every 100 --log-every 50 --metrics "$out/$1.jsonl" | tee "$out/$1.log"
}
run bf16
run fp8
echo
echo "== FP8 vs BF16 on the synthetic corpus (tiny LLaMA, 400 steps, CPU)"
for p in bf16 fp8; do
  printf '%-5s %s\n' "$p" "$(grep '^final val_loss' "$out/$p.log")"
done
