// cli/main.cpp: the `octet` command: dispatches to its subcommands.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench.h"
#include "core/device.h"
#include "core/error.h"

namespace {

constexpr const char* kUsage = R"(octet: FP8 mixed-precision training for LLaMA-style models

usage: octet <command> [flags]

commands:
  bench gemm    time the GEMMs and FP8 conversions of one device
                  --device cpu|cuda   (default cpu)
                  --sizes 256,512,... square sizes (default 256..4096)
                  --json FILE         also write one JSON record per row
                  --threads N         CPU threads (default: all cores)
                  --reps N            timed calls per cell, at least (default 10)
                  --impl auto|onednn|reference   CPU GEMM engine (default auto)

  --help        this text
  --version     the version and what this build contains

The trainer (octet train, octet sample) arrives with the model code.
)";

int print_version() {
  std::printf("octet %s (CUDA %s, %d GPU(s) visible)\n", OCTET_VERSION,
              octet::cuda_compiled() ? "built in" : "not built", octet::cuda_device_count());
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return args.empty() ? 1 : 0;
  }
  if (args[0] == "--version") return print_version();
  if (args[0] == "bench") {
    OCTET_CHECK(args.size() >= 2, "bench", "name what to benchmark: octet bench gemm");
    const std::vector<std::string> rest(args.begin() + 2, args.end());
    if (args[1] == "gemm") return octet::bench::bench_gemm_main(rest);
    OCTET_FAIL("bench", "unknown benchmark '", args[1], "'; available: gemm");
  }
  OCTET_FAIL("octet", "unknown command '", args[0], "'; run octet --help");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const octet::Error& e) {
    std::fprintf(stderr, "octet: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet: internal error: %s\n", e.what());
    return 3;
  }
}
