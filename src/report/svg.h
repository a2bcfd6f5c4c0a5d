// report/svg.h: line plots as inline SVG text, for the run report (no plotting library, no
// script: the figure is the markup). Axes with round tick values and labels, one polyline per
// series (a gap where a value is missing), point markers with a tooltip (guard checks and
// actions), vertical rules (a precision switch) and horizontal reference lines.
// defines: Series, Marker, VRule, HLine, Plot, plot_svg, nice_ticks, format_tick,
//          svg_number, html_escape, palette_color
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace octet::report {

// One curve: y over x; a NaN y breaks the line there.
struct Series {
  std::string label;
  std::string color;
  std::vector<double> x, y;
  bool dashed = false;
  bool dots = false;  // a dot at each point instead of a line (sparse values: val loss)
};

// A point of interest drawn on top of the curves. shape: "circle", "triangle" or "square".
struct Marker {
  double x = 0, y = 0;
  std::string shape = "circle";
  std::string color;
  std::string css_class;  // "guard-pass", "guard-fail", "guard-action": what tests look for
  std::string title;      // the tooltip
};

// A vertical line across the plot at x, with a short label at the top.
struct VRule {
  double x = 0;
  std::string color, label, css_class;
};

// A horizontal reference line at y (0 gap, the guard's tolerance).
struct HLine {
  double y = 0;
  std::string color, label;
};

struct Plot {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<Marker> markers;
  std::vector<VRule> rules;
  std::vector<HLine> lines;
  int width = 760, height = 340;
  bool y_percent = false;  // tick labels as percentages (values are fractions)
};

// The plot as one <svg> element (class "plot"). Series with more points than the plot has
// pixels are thinned to bucket means first. A plot with no finite point says so in its box.
std::string plot_svg(const Plot& plot);

// About `target` round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// A tick value in the fewest digits that tell neighbouring ticks (step) apart.
std::string format_tick(double value, double step, bool percent = false);

// A coordinate or length in SVG markup: one decimal ("12.5").
std::string svg_number(double v);

// Text safe inside HTML/SVG elements and attribute values.
std::string html_escape(std::string_view text);

// The i-th colour of the report's palette (distinct for the first 8 runs).
std::string palette_color(size_t i);

}  // namespace octet::report
