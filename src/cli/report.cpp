// cli/report.cpp: `octet report RUN_DIR... -o report.html`: training runs turned into one
// self-contained HTML page (report/report.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "report/report.h"

namespace octet::cli {
namespace {

struct ReportFlags {
  std::vector<std::string> runs;
  std::string out = "report.html";
};

int report(const ReportFlags& f) {
  report::write_report(f.runs, f.out);
  std::printf("octet report: %zu run(s) -> %s\n", f.runs.size(), f.out.c_str());
  return 0;
}

}  // namespace

void add_report_command(Commands& commands, CLI::App& octet) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* r = commands.add(
      octet, "report",
      "one self-contained HTML page from training runs: loss against step and wall time, the "
      "gap to the first bf16 run, tokens/s, the FP8 guard's checks and actions, per-layer FP8 "
      "health, each run's config, commit and machine",
      [f] { return report(*f); });
  r->add_option("runs", f->runs,
                "run directories (octet train --out DIR: run.json and metrics.jsonl) or metrics "
                "files; gaps are relative to the first bf16 run")
      ->required()
      ->check(CLI::ExistingPath);
  r->add_option("-o,--output", f->out, "the HTML file to write");
}

}  // namespace octet::cli
