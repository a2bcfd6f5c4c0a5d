// cli/main.cpp: the `octet` command: its subcommands, each declared in its own file.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/bench/bench.h"
#include "cli/command.h"
#include "core/device.h"

namespace octet::cli {
void add_train_commands(Commands& commands, CLI::App& octet);    // cli/train.cpp: train, sample
void add_tokenize_command(Commands& commands, CLI::App& octet);  // cli/tokenize.cpp
void add_eval_command(Commands& commands, CLI::App& octet);      // cli/eval.cpp
void add_compare_command(Commands& commands, CLI::App& octet);   // cli/compare.cpp
void add_report_command(Commands& commands, CLI::App& octet);    // cli/report.cpp
}  // namespace octet::cli

int main(int argc, char** argv) {
  using namespace octet;
  CLI::App app("octet: FP8 mixed-precision training for LLaMA-style models", "octet");
  app.option_defaults()->always_capture_default();
  app.add_flag_callback(
      "--version",
      [] {
        std::printf("octet %s (CUDA %s, %d GPU(s) visible)\n", OCTET_VERSION,
                    cuda_compiled() ? "built in" : "not built", cuda_device_count());
        throw CLI::Success();
      },
      "the version and what this build contains");
  cli::Commands commands;
  cli::add_train_commands(commands, app);
  cli::add_tokenize_command(commands, app);
  cli::add_eval_command(commands, app);
  cli::add_compare_command(commands, app);
  cli::add_report_command(commands, app);
  bench::add_bench_commands(commands, app);
  app.footer("Ctrl-C during `octet train` writes a checkpoint (with --out) and exits.");
  return cli::run_command_line(app, commands, std::vector<std::string>(argv + 1, argv + argc));
}
