// cli/bench/bench.cpp: `octet bench`, the group of the benchmark subcommands.
#include "cli/bench/bench.h"

namespace octet::bench {

void add_bench_commands(cli::Commands& commands, CLI::App& octet) {
  CLI::App* bench =
      commands.add(octet, "bench", "time GEMMs, FP8 quantization, attention or training steps");
  add_bench_gemm(commands, *bench);
  add_bench_step(commands, *bench);
  add_bench_attention(commands, *bench);
  add_bench_quantize(commands, *bench);
  add_bench_comm(commands, *bench);
}

}  // namespace octet::bench
