// report/heatmap.cpp
#include "report/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/svg.h"

namespace octet::report {
namespace {

std::string share_text(double v) {
  char buf[32];
  if (v == 0) return "0";
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

std::string heat_color(double value, double lo, double hi) {
  if (!std::isfinite(value)) return "#d9d9d9";
  if (value <= 0) return "#e8f3e8";
  double t = (std::log10(value) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  t = std::clamp(t, 0.0, 1.0);
  // Three stops: light yellow (255,240,160), orange (240,120,40), dark red (120,0,20).
  const double stops[3][3] = {{255, 240, 160}, {240, 120, 40}, {120, 0, 20}};
  const int seg = t < 0.5 ? 0 : 1;
  const double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  char buf[16];
  int rgb[3];
  for (int c = 0; c < 3; ++c) {
    rgb[c] = static_cast<int>(std::lround(stops[seg][c] + u * (stops[seg + 1][c] - stops[seg][c])));
  }
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

std::string heatmap_svg(const Heatmap& map) {
  const size_t rows = map.rows.size(), steps = map.steps.size();
  // Bins of consecutive steps: the worst value of each.
  const size_t per =
      std::max<size_t>(1, (steps + map.max_columns - 1) / std::max<size_t>(1, map.max_columns));
  const size_t cols = (steps + per - 1) / per;
  const double label_w = 150, top = 30, cell_h = 12, bar_w = 150;
  const double cell_w = cols ? std::clamp(520.0 / static_cast<double>(cols), 2.0, 24.0) : 0;
  const double grid_w = cell_w * static_cast<double>(cols);
  const double bar_h = 14 * (std::log10(map.hi / map.lo) + 2);  // 0, then each decade
  const double w = label_w + std::max(grid_w, 400.0) + 20 + bar_w,
               h = std::max(top + cell_h * static_cast<double>(rows) + 50, top + bar_h + 10);

  std::string out = "<svg class=\"heatmap\" width=\"" + svg_number(w) + "\" height=\"" +
                    svg_number(h) + "\" viewBox=\"0 0 " + svg_number(w) + " " + svg_number(h) +
                    "\" role=\"img\" aria-label=\"" + html_escape(map.title) +
                    "\">\n<rect x=\"0\" y=\"0\" width=\"" + svg_number(w) + "\" height=\"" +
                    svg_number(h) + "\" fill=\"#fff\"/>\n";
  out += "<text class=\"title\" x=\"4\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" +
         html_escape(map.title) + "</text>\n";
  for (size_t r = 0; r < rows; ++r) {
    const double y = top + cell_h * static_cast<double>(r);
    out += "<text class=\"row-label\" x=\"" + svg_number(label_w - 4) + "\" y=\"" +
           svg_number(y + cell_h - 2.5) + "\" font-size=\"10\" text-anchor=\"end\">" +
           html_escape(map.rows[r]) + "</text>\n";
    for (size_t c = 0; c < cols; ++c) {
      double v = std::nan("");
      for (size_t s = c * per; s < std::min(steps, (c + 1) * per); ++s) {
        const double x = map.values[r * steps + s];
        if (std::isfinite(x) && !(v >= x)) v = x;
      }
      if (!std::isfinite(v)) continue;
      const int64_t step = map.steps[c * per];
      const int64_t last = map.steps[std::min(steps, (c + 1) * per) - 1];
      const std::string when =
          step == last ? "step " + std::to_string(step)
                       : "steps " + std::to_string(step) + "-" + std::to_string(last) + " (max)";
      out += "<rect class=\"cell\" data-row=\"" + html_escape(map.rows[r]) + "\" data-step=\"" +
             std::to_string(step) + "\" data-value=\"" + share_text(v) + "\" x=\"" +
             svg_number(label_w + cell_w * static_cast<double>(c)) + "\" y=\"" + svg_number(y) +
             "\" width=\"" + svg_number(cell_w) + "\" height=\"" + svg_number(cell_h) +
             "\" fill=\"" + heat_color(v, map.lo, map.hi) + "\"><title>" +
             html_escape(map.rows[r]) + ", " + when + ": " + html_escape(map.value_name) + " " +
             share_text(v) + "</title></rect>\n";
    }
  }
  // Step ticks under the grid: the first column, the last, and up to 4 between.
  const double base = top + cell_h * static_cast<double>(rows);
  out += "<rect class=\"grid-frame\" x=\"" + svg_number(label_w) + "\" y=\"" + svg_number(top) +
         "\" width=\"" + svg_number(grid_w) + "\" height=\"" + svg_number(base - top) +
         "\" fill=\"none\" stroke=\"#888\"/>\n";
  const size_t tick_every = std::max<size_t>(1, cols / 5);
  for (size_t c = 0; c < cols; c += tick_every) {
    const double x = label_w + cell_w * (static_cast<double>(c) + 0.5);
    out += "<text class=\"tick x\" x=\"" + svg_number(x) + "\" y=\"" + svg_number(base + 13) +
           "\" font-size=\"10\" text-anchor=\"middle\">" + std::to_string(map.steps[c * per]) +
           "</text>\n";
  }
  out += "<text class=\"axis-label x\" x=\"" + svg_number(label_w + grid_w / 2) + "\" y=\"" +
         svg_number(base + 30) + "\" font-size=\"12\" text-anchor=\"middle\">step</text>\n";
  // The colour bar: 0, then lo .. hi by decades.
  const double bx = label_w + std::max(grid_w, 400.0) + 20;
  out += "<text x=\"" + svg_number(bx) + "\" y=\"" + svg_number(top - 4) + "\" font-size=\"10\">" +
         html_escape(map.value_name) + " (share)</text>\n";
  std::vector<double> levels = {0.0};
  for (double v = map.lo; v <= map.hi * 1.0001; v *= 10) levels.push_back(v);
  for (size_t i = 0; i < levels.size(); ++i) {
    const double y = top + 14 * static_cast<double>(i);
    out += "<rect class=\"bar\" x=\"" + svg_number(bx) + "\" y=\"" + svg_number(y) +
           "\" width=\"18\" height=\"14\" fill=\"" + heat_color(levels[i], map.lo, map.hi) +
           "\" stroke=\"#ccc\"/><text x=\"" + svg_number(bx + 24) + "\" y=\"" + svg_number(y + 11) +
           "\" font-size=\"10\">" + (i == levels.size() - 1 ? "&#8805; " : "") +
           share_text(levels[i]) + "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace octet::report
