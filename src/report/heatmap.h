// report/heatmap.h: a rows x steps heatmap as inline SVG, for per-layer FP8 health (the share
// of values that saturated or were flushed to zero): one cell per value on a log colour scale,
// with a tooltip, a colour bar and step ticks. Long runs are binned to at most max_columns
// columns, each showing the worst (largest) value of its steps.
// defines: Heatmap, heatmap_svg, heat_color
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace octet::report {

struct Heatmap {
  std::string title, value_name;  // value_name: "saturated" (tooltips, the bar's caption)
  std::vector<std::string> rows;
  std::vector<int64_t> steps;
  std::vector<double> values;   // rows.size() x steps.size(), row-major; NaN: no value
  double lo = 1e-6, hi = 1e-1;  // the colour scale's ends (shares at or beyond them clamp)
  size_t max_columns = 160;
};

// The heatmap as one <svg class="heatmap">: cells are <rect class="cell"> with data-row,
// data-step (the bin's first step) and data-value.
std::string heatmap_svg(const Heatmap& map);

// The colour of a share: a pale green for exactly 0, then yellow to dark red over
// log10(lo)..log10(hi); grey for NaN.
std::string heat_color(double value, double lo, double hi);

}  // namespace octet::report
