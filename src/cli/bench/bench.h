// cli/bench/bench.h: the `octet bench ...` subcommands (gemm, step, attention, quantize),
// each declared with its flags in its own file.
// defines: add_bench_commands, add_bench_gemm, add_bench_step, add_bench_attention,
//          add_bench_quantize, add_bench_comm, BenchGemmOptions, bench_gemm_cuda
#pragma once

#include <string>
#include <vector>

#include "cli/command.h"

namespace octet::bench {

// Adds `octet bench` and its subcommands.
void add_bench_commands(cli::Commands& commands, CLI::App& octet);

void add_bench_gemm(cli::Commands& commands, CLI::App& bench);       // bench_gemm.cpp
void add_bench_step(cli::Commands& commands, CLI::App& bench);       // bench_step.cpp
void add_bench_attention(cli::Commands& commands, CLI::App& bench);  // bench_attention.cpp
void add_bench_quantize(cli::Commands& commands, CLI::App& bench);   // bench_quantize.cpp
void add_bench_comm(cli::Commands& commands, CLI::App& bench);       // bench_comm.cpp

// The flags of `octet bench gemm`; the CPU and the CUDA halves read them.
struct BenchGemmOptions {
  std::string device = "cpu";
  std::vector<long long> sizes;                                 // empty: the device's default list
  std::string json;                                             // empty: no --json file
  int threads = 0;                                              // CPU threads (0: all cores)
  int reps = 0;                                                 // 0: the device's default
  std::string impl = "auto";                                    // CPU engine
  long long max_size = 16384;                                   // cuda: leave out larger squares
  std::vector<std::string> suites = {"square", "llama", "te"};  // cuda
  bool max_size_given = false, suite_given = false;
  std::string layer;        // cpu: a model whose layer's GEMMs to time (empty: squares)
  long long tokens = 2048;  // --layer: T
  std::vector<std::string> recipes = {"tensor-current", "row", "block", "mx"};  // --layer
};

// The CUDA half of bench gemm (bench_gemm_cuda.cpp): bf16 vs FP8 on squares, LLaMA-2
// 7B/13B linear shapes and Transformer Engine's H200 layer. Returns the exit code.
int bench_gemm_cuda(const BenchGemmOptions& options);

}  // namespace octet::bench
