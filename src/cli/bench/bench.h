// cli/bench/bench.h: the `octet bench ...` subcommands. Each takes the arguments
// after its name and returns the process exit code.
// defines: bench_gemm_main, bench_gemm_cuda, bench_step_main, bench_attention_main,
//          bench_quantize_main
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"

namespace octet::bench {

// octet bench gemm --device cpu|cuda [--sizes 256,512,...] [--json FILE] [--reps N]
//   CPU:  [--threads N] [--impl auto|onednn|reference]
//   CUDA: [--max-size N] [--suite square,llama,te]
int bench_gemm_main(const std::vector<std::string>& args);

// octet bench step --device cpu|cuda --model tiny|small|1b|7b|config.json [--layers N]
//                  [--batch B,...] [--seq S,...] [--precision bf16,fp8] [--recipe R,...]
//                  [--warmup W] [--steps N] [--json] [--sweep] [--print-hf-config]
// Times whole training steps; returns 1 when a run failed (the others are still reported).
int bench_step_main(const std::vector<std::string>& args);

// octet bench attention [--device cuda|cpu] [--dtype bf16|f32] [--shapes BxSxHqxHkvxhd,...]
//                       [--reps N] [--json FILE]
int bench_attention_main(const std::vector<std::string>& args);
// octet bench quantize --device cpu|cuda [--shapes 4096x4096,...] [--input bf16|f32]
//                      [--fp8 e4m3|e5m2] [--counts] [--reps N] [--json FILE]
int bench_quantize_main(const std::vector<std::string>& args);
// The CUDA half of bench gemm (bench_gemm_cuda.cpp): bf16 vs FP8 on squares, LLaMA-2
// 7B/13B linear shapes and Transformer Engine's H200 layer. Returns the exit code.
int bench_gemm_cuda(const cli::Args& args);

}  // namespace octet::bench
