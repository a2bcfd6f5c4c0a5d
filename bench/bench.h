// bench/bench.h: the `octet bench ...` subcommands. Each takes the arguments
// after its name and returns the process exit code.
// defines: bench_gemm_main, bench_gemm_cuda
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"

namespace octet::bench {

// octet bench gemm --device cpu|cuda [--sizes 256,512,...] [--json FILE] [--reps N]
//   CPU:  [--threads N] [--impl auto|onednn|reference]
//   CUDA: [--max-size N] [--suite square,llama,te]
int bench_gemm_main(const std::vector<std::string>& args);

// The CUDA half of bench gemm (bench_gemm_cuda.cpp): bf16 vs FP8 on squares, LLaMA-2
// 7B/13B linear shapes and Transformer Engine's H200 layer. Returns the exit code.
int bench_gemm_cuda(const cli::Args& args);

}  // namespace octet::bench
