// report/svg.cpp
#include "report/svg.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>

namespace octet::report {
namespace {

constexpr double kLeft = 64, kRight = 178, kTop = 34, kBottom = 46;  // margins (px)

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  // A zero-width range widened so that its one value sits in the middle.
  void widen() {
    if (hi > lo) return;
    const double d = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
};

// Series with more points than pixels: the means of consecutive buckets (NaN only where a
// whole bucket is missing), so that a long run stays a small file.
Series thinned(const Series& s, size_t max_points) {
  const size_t n = std::min(s.x.size(), s.y.size());
  if (n <= max_points) return s;
  Series out = s;
  out.x.clear();
  out.y.clear();
  const size_t per = (n + max_points - 1) / max_points;
  for (size_t b = 0; b < n; b += per) {
    double sx = 0, sy = 0;
    size_t k = 0;
    for (size_t i = b; i < std::min(n, b + per); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      sx += s.x[i];
      sy += s.y[i];
      ++k;
    }
    out.x.push_back(k ? sx / static_cast<double>(k) : s.x[b]);
    out.y.push_back(k ? sy / static_cast<double>(k) : std::nan(""));
  }
  return out;
}

std::string marker_svg(const Marker& m, double px, double py) {
  const std::string cls = m.css_class.empty() ? "marker" : "marker " + m.css_class;
  std::string shape;
  if (m.shape == "triangle") {
    shape = "<path class=\"" + cls + "\" d=\"M" + svg_number(px) + " " + svg_number(py - 6) + " L" +
            svg_number(px + 5.5) + " " + svg_number(py + 4) + " L" + svg_number(px - 5.5) + " " +
            svg_number(py + 4) + " Z\" fill=\"" + m.color +
            "\" stroke=\"#222\" stroke-width=\"0.8\">";
    return shape + "<title>" + html_escape(m.title) + "</title></path>";
  }
  if (m.shape == "square") {
    shape = "<rect class=\"" + cls + "\" x=\"" + svg_number(px - 4) + "\" y=\"" +
            svg_number(py - 4) + "\" width=\"8\" height=\"8\" fill=\"" + m.color +
            "\" stroke=\"#222\" " + "stroke-width=\"0.8\">";
    return shape + "<title>" + html_escape(m.title) + "</title></rect>";
  }
  shape = "<circle class=\"" + cls + "\" cx=\"" + svg_number(px) + "\" cy=\"" + svg_number(py) +
          "\" r=\"4\" fill=\"" + m.color + "\" stroke=\"#222\" stroke-width=\"0.8\">";
  return shape + "<title>" + html_escape(m.title) + "</title></circle>";
}

}  // namespace

std::string svg_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string palette_color(size_t i) {
  static const char* const colors[] = {"#1f6fb4", "#e0671b", "#2a9d3c", "#c8322d",
                                       "#7b52ab", "#8c564b", "#d0479b", "#5f6b6d"};
  return colors[i % 8];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi < lo || target < 1) return ticks;
  if (hi == lo) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1.0) {
    const double v = k * step;
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);  // no "-0"
  }
  return ticks;
}

std::string format_tick(double value, double step, bool percent) {
  if (percent) {
    value *= 100;
    step *= 100;
  }
  int decimals = 0;
  if (step > 0 && step < 1) decimals = static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char buf[48];
  if (!percent && std::abs(value) >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3g", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f%s", std::min(decimals, 9), value, percent ? "%" : "");
  }
  return buf;
}

std::string plot_svg(const Plot& plot) {
  const double w = plot.width, h = plot.height;
  const double x0 = kLeft, x1 = w - kRight, y0 = kTop, y1 = h - kBottom;
  std::vector<Series> series;
  Range xr, yr;
  for (const Series& s : plot.series) {
    series.push_back(thinned(s, static_cast<size_t>(x1 - x0)));
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      xr.add(s.x[i]);
      yr.add(s.y[i]);
    }
  }
  for (const Marker& m : plot.markers) {
    xr.add(m.x);
    yr.add(m.y);
  }
  for (const VRule& r : plot.rules) xr.add(r.x);
  const bool has_data = !xr.empty() && !yr.empty();
  for (const HLine& l : plot.lines) yr.add(l.y);

  std::string out = "<svg class=\"plot\" width=\"" + svg_number(w) + "\" height=\"" +
                    svg_number(h) + "\" viewBox=\"0 0 " + svg_number(w) + " " + svg_number(h) +
                    "\" role=\"img\" aria-label=\"" + html_escape(plot.title) + "\">\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + svg_number(w) + "\" height=\"" + svg_number(h) +
         "\" fill=\"#fff\"/>\n";
  out += "<text class=\"title\" x=\"" + svg_number(x0) + "\" y=\"20\" font-size=\"14\" " +
         "font-weight=\"bold\">" + html_escape(plot.title) + "</text>\n";
  out += "<rect class=\"frame\" x=\"" + svg_number(x0) + "\" y=\"" + svg_number(y0) +
         "\" width=\"" + svg_number(x1 - x0) + "\" height=\"" + svg_number(y1 - y0) +
         "\" fill=\"none\" stroke=\"#888\"/>\n";
  out += "<text class=\"axis-label x\" x=\"" + svg_number((x0 + x1) / 2) + "\" y=\"" +
         svg_number(h - 8) + "\" font-size=\"12\" text-anchor=\"middle\">" +
         html_escape(plot.x_label) + "</text>\n";
  out += "<text class=\"axis-label y\" x=\"14\" y=\"" + svg_number((y0 + y1) / 2) +
         "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 " +
         svg_number((y0 + y1) / 2) + ")\">" + html_escape(plot.y_label) + "</text>\n";
  if (!has_data) {
    out += "<text class=\"no-data\" x=\"" + svg_number((x0 + x1) / 2) + "\" y=\"" +
           svg_number((y0 + y1) / 2) +
           "\" font-size=\"13\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n</svg>\n";
    return out;
  }
  xr.widen();
  const double pad = (yr.hi - yr.lo) * 0.05;
  yr.lo -= pad;
  yr.hi += pad;
  yr.widen();
  auto px = [&](double x) { return x0 + (x - xr.lo) / (xr.hi - xr.lo) * (x1 - x0); };
  auto py = [&](double y) { return y1 - (y - yr.lo) / (yr.hi - yr.lo) * (y1 - y0); };

  // Ticks and grid.
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 6), yt = nice_ticks(yr.lo, yr.hi, 5);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (const double t : xt) {
    out += "<line x1=\"" + svg_number(px(t)) + "\" y1=\"" + svg_number(y0) + "\" x2=\"" +
           svg_number(px(t)) + "\" y2=\"" + svg_number(y1) +
           "\" stroke=\"#eee\"/><text class=\"tick x\" x=\"" + svg_number(px(t)) + "\" y=\"" +
           svg_number(y1 + 15) + "\" font-size=\"11\" text-anchor=\"middle\">" +
           format_tick(t, xstep) + "</text>\n";
  }
  for (const double t : yt) {
    out += "<line x1=\"" + svg_number(x0) + "\" y1=\"" + svg_number(py(t)) + "\" x2=\"" +
           svg_number(x1) + "\" y2=\"" + svg_number(py(t)) +
           "\" stroke=\"#eee\"/><text class=\"tick y\" x=\"" + svg_number(x0 - 5) + "\" y=\"" +
           svg_number(py(t) + 4) + "\" font-size=\"11\" text-anchor=\"end\">" +
           format_tick(t, ystep, plot.y_percent) + "</text>\n";
  }
  for (const HLine& l : plot.lines) {
    out += "<line class=\"hline\" x1=\"" + svg_number(x0) + "\" y1=\"" + svg_number(py(l.y)) +
           "\" x2=\"" + svg_number(x1) + "\" y2=\"" + svg_number(py(l.y)) + "\" stroke=\"" +
           l.color + "\" stroke-dasharray=\"2 3\"/><text x=\"" + svg_number(x1 - 4) + "\" y=\"" +
           svg_number(py(l.y) - 3) + "\" font-size=\"10\" text-anchor=\"end\" fill=\"" + l.color +
           "\">" + html_escape(l.label) + "</text>\n";
  }
  // Curves, clipped to the frame.
  static std::atomic<int> clip_id{0};
  const std::string clip = "clip" + std::to_string(++clip_id);
  out += "<clipPath id=\"" + clip + "\"><rect x=\"" + svg_number(x0) + "\" y=\"" + svg_number(y0) +
         "\" width=\"" + svg_number(x1 - x0) + "\" height=\"" + svg_number(y1 - y0) +
         "\"/></clipPath>\n";
  out += "<g clip-path=\"url(#" + clip + ")\">\n";
  for (const Series& s : series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    if (s.dots) {
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(s.y[i])) continue;
        out += "<circle class=\"dot\" cx=\"" + svg_number(px(s.x[i])) + "\" cy=\"" +
               svg_number(py(s.y[i])) + "\" r=\"2.5\" fill=\"" + s.color + "\"/>";
      }
      out += "\n";
      continue;
    }
    std::string d;
    bool pen_down = false;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.y[i])) {
        pen_down = false;
        continue;
      }
      // x going back (the steps a rollback repeats) starts a new stroke, not a line back.
      if (i > 0 && s.x[i] < s.x[i - 1]) pen_down = false;
      d += (pen_down ? " L" : (d.empty() ? "M" : " M")) + svg_number(px(s.x[i])) + " " +
           svg_number(py(s.y[i]));
      pen_down = true;
    }
    if (d.empty()) continue;
    out += "<path class=\"series\" data-label=\"" + html_escape(s.label) + "\" d=\"" + d +
           "\" fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.5\"" +
           (s.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>\n";
  }
  out += "</g>\n";
  for (size_t k = 0; k < plot.rules.size(); ++k) {
    const VRule& r = plot.rules[k];
    const double label_y = y0 + 11 + 11 * static_cast<double>(k % 3);  // rules close together
    const std::string cls = r.css_class.empty() ? "rule" : "rule " + r.css_class;
    out += "<line class=\"" + cls + "\" x1=\"" + svg_number(px(r.x)) + "\" y1=\"" + svg_number(y0) +
           "\" x2=\"" + svg_number(px(r.x)) + "\" y2=\"" + svg_number(y1) + "\" stroke=\"" +
           r.color + "\" stroke-dasharray=\"4 3\"/><text x=\"" + svg_number(px(r.x) + 3) +
           "\" y=\"" + svg_number(label_y) + "\" font-size=\"10\" fill=\"" + r.color + "\">" +
           html_escape(r.label) + "</text>\n";
  }
  for (const Marker& m : plot.markers) {
    if (std::isfinite(m.x) && std::isfinite(m.y)) out += marker_svg(m, px(m.x), py(m.y)) + "\n";
  }
  // Legend, right of the frame.
  double ly = y0 + 8;
  for (const Series& s : plot.series) {
    const std::string dash = s.dots ? "2 4" : s.dashed ? "5 3" : "";
    out += "<g class=\"legend\"><line x1=\"" + svg_number(x1 + 10) + "\" y1=\"" + svg_number(ly) +
           "\" x2=\"" + svg_number(x1 + 32) + "\" y2=\"" + svg_number(ly) + "\" stroke=\"" +
           s.color + "\" stroke-width=\"" + (s.dots ? "4" : "2") + "\"" +
           (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/><text x=\"" +
           svg_number(x1 + 37) + "\" y=\"" + svg_number(ly + 4) + "\" font-size=\"11\">" +
           html_escape(s.label) + "</text></g>\n";
    ly += 16;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace octet::report
