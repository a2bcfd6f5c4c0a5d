// report/report.h: `octet report`: training runs turned into one self-contained HTML page (no
// script, no network: inline SVG and CSS). Loss against step and against wall time with every
// run overlaid, the relative gap to the first bf16 run, tokens/s, the convergence guard's
// checks and actions marked on the curves, per-layer FP8 health heatmaps (saturation and
// underflow) and each run's config, commit and machine from its run.json.
// defines: render_report, write_report
#pragma once

#include <string>
#include <vector>

#include "report/run_data.h"

namespace octet::report {

// The whole HTML document for `runs` (at least one).
std::string render_report(const std::vector<RunData>& runs);

// Loads each of `run_paths` (load_run) and writes render_report to `out_path` atomically.
void write_report(const std::vector<std::string>& run_paths, const std::string& out_path);

}  // namespace octet::report
