// bench/bench.h: the `octet bench ...` subcommands. Each takes the arguments
// after its name and returns the process exit code.
// defines: bench_gemm_main, bench_step_main, bench_attention_main, bench_quantize_main
#pragma once

#include <string>
#include <vector>

namespace octet::bench {

// octet bench gemm --device cpu|cuda [--sizes 256,512,...] [--json FILE] [--threads N]
//                  [--reps N] [--impl auto|onednn|reference]
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

}  // namespace octet::bench
