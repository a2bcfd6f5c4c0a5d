// report/report.cpp
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "io/atomic_file.h"
#include "report/heatmap.h"
#include "report/svg.h"

namespace octet::report {
namespace {

std::string fmt(double v, const char* format = "%.4f") {
  if (!std::isfinite(v)) return "&#8212;";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string percent(double v) {
  return std::isfinite(v) ? fmt(100 * v, "%+.2f") + "%" : fmt(v);
}

// "fp8", or "fp8 &#8594; bf16" when the guard switched the run.
std::string precision_path(const RunData& run) {
  std::string path = run.precision(), last = path;
  for (const RunRecord& r : run.records) {
    if (!r.precision.empty() && r.precision != last) {
      path += " \xe2\x86\x92 " + r.precision;  // the arrow, in UTF-8
      last = r.precision;
    }
  }
  return path.empty() ? "?" : path;
}

std::string label(const RunData& run) {
  const std::string p = run.precision();
  return p.empty() || p == run.name ? run.name : run.name + " (" + p + ")";
}

constexpr size_t kGapWindow = 10;  // steps in the training-loss means of the gap plot

// The run every other run's gap is measured against: the first bf16 run, else the first.
size_t reference_run(const std::vector<RunData>& runs) {
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].precision() == "bf16") return i;
  }
  return 0;
}

double guard_tolerance(const RunData& run) {
  if (run.info.is_object() && run.info.contains("config") && run.info["config"].is_object()) {
    const Json& c = run.info["config"];
    for (const char* key : {"guard_tolerance", "guard-tolerance"}) {
      if (c.contains(key) && c[key].is_number()) return c[key].get<double>();
    }
  }
  return 0.005;  // the guard's default
}

// The guard's checks and actions and the precision switches of `run`, as marks on a plot
// whose x is the step (x_of = step) or the wall time.
void add_guard_marks(const RunData& run, const std::vector<double>& x_of, Plot& plot) {
  for (const GuardPoint& g : run.guard) {
    if (g.record >= x_of.size()) continue;
    const double x = x_of[g.record];
    Marker m;
    m.x = x;
    m.y = g.fp8_loss;
    m.shape = "circle";
    m.color = g.passed ? "#2a9d3c" : "#f0a020";
    m.css_class = g.passed ? "guard-pass" : "guard-fail";
    m.title = run.name + " guard check at step " + std::to_string(g.step) + ": fp8 " +
              fmt(g.fp8_loss) + ", bf16 " + fmt(g.bf16_loss) + ", gap " + percent(g.gap) +
              (g.passed ? " (passed)" : " (failed, strike " + std::to_string(g.strikes) + ")");
    plot.markers.push_back(m);
    if (g.action == "none" || g.action.empty()) continue;
    std::string text = g.action;
    if (g.rollback_step) text += " to step " + std::to_string(*g.rollback_step);
    Marker a = m;
    a.shape = "triangle";
    a.color = "#d62020";
    a.css_class = "guard-action";
    a.title = run.name + " guard " + text + " at step " + std::to_string(g.step);
    plot.markers.push_back(a);
    plot.rules.push_back({x, "#d62020", "guard: " + text, "guard-action"});
  }
  std::string last = run.records.empty() ? "" : run.records.front().precision;
  for (size_t i = 0; i < run.records.size() && i < x_of.size(); ++i) {
    const std::string& p = run.records[i].precision;
    if (!p.empty() && !last.empty() && p != last) {
      plot.rules.push_back({x_of[i], "#7b52ab", last + " \xe2\x86\x92 " + p, "precision-switch"});
    }
    if (!p.empty()) last = p;
  }
}

// Training loss (a line) and validation loss (dots) of every run against x.
Plot loss_plot(const std::vector<RunData>& runs, bool wall, std::string& note) {
  Plot plot;
  plot.title = wall ? "Loss against wall time" : "Loss against step";
  plot.x_label = wall ? "wall time (s)" : "step";
  plot.y_label = "loss (nats/token)";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = runs[i];
    std::vector<double> x;
    if (wall) {
      x = run_wall_times(run);
      if (x.empty()) {
        note += run.name + " has no wall_s and no tokens_per_step to derive it. ";
        continue;
      }
    } else {
      for (const RunRecord& r : run.records) x.push_back(static_cast<double>(r.step));
    }
    Series train{label(run) + " train", palette_color(i), x, {}};
    Series val{label(run) + " val", palette_color(i), {}, {}};
    val.dots = true;
    for (size_t k = 0; k < run.records.size(); ++k) {
      train.y.push_back(run.records[k].loss);
      if (std::isfinite(run.records[k].val_loss)) {
        val.x.push_back(x[k]);
        val.y.push_back(run.records[k].val_loss);
      }
    }
    plot.series.push_back(std::move(train));
    if (!val.x.empty()) plot.series.push_back(std::move(val));
    add_guard_marks(run, x, plot);
  }
  return plot;
}

// (loss - reference loss) / reference loss at the steps both runs have, per run; the guard's
// own gap (fp8 against bf16 evaluation of the same weights) as dots.
Plot gap_plot(const std::vector<RunData>& runs, size_t ref) {
  Plot plot;
  plot.title = "Relative gap to " + label(runs[ref]);
  plot.x_label = "step";
  plot.y_label = "loss gap (relative)";
  plot.y_percent = true;
  std::map<int64_t, double> ref_loss, ref_val;
  for (const RunRecord& r : runs[ref].records) {
    ref_loss[r.step] = r.loss;  // after a rollback, the latest record of a step
    if (std::isfinite(r.val_loss)) ref_val[r.step] = r.val_loss;
  }
  double tolerance = 0.005;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = runs[i];
    if (!run.guard.empty()) tolerance = guard_tolerance(run);
    Series train{label(run) + " train (" + std::to_string(kGapWindow) + "-step mean)",
                 palette_color(i),
                 {},
                 {}};
    Series val{label(run) + " val", palette_color(i), {}, {}};
    val.dots = true;
    if (i != ref) {
      // One step's training loss is one batch's: the gap of the means over the last
      // kGapWindow steps both runs have (restarted where the steps go back, after a rollback).
      double sum = 0, ref_sum = 0;
      std::vector<std::pair<double, double>> window;
      int64_t last_step = -1;
      for (const RunRecord& r : run.records) {
        const auto it = ref_loss.find(r.step);
        if (r.step <= last_step) {
          window.clear();
          sum = ref_sum = 0;
        }
        last_step = r.step;
        if (it == ref_loss.end()) continue;
        if (std::isfinite(r.loss) && std::isfinite(it->second)) {
          window.emplace_back(r.loss, it->second);
          sum += r.loss;
          ref_sum += it->second;
          if (window.size() > kGapWindow) {
            sum -= window.front().first;
            ref_sum -= window.front().second;
            window.erase(window.begin());
          }
        }
        train.x.push_back(static_cast<double>(r.step));
        train.y.push_back(window.empty() ? std::nan("") : sum / ref_sum - 1.0);
        const auto v = ref_val.find(r.step);
        if (v != ref_val.end() && std::isfinite(r.val_loss)) {
          val.x.push_back(static_cast<double>(r.step));
          val.y.push_back((r.val_loss - v->second) / v->second);
        }
      }
      if (!train.x.empty()) plot.series.push_back(std::move(train));
      if (!val.x.empty()) plot.series.push_back(std::move(val));
    }
    Series guard{label(run) + " guard gap", palette_color(i), {}, {}};
    guard.dashed = true;
    for (const GuardPoint& g : run.guard) {
      guard.x.push_back(static_cast<double>(g.step));
      guard.y.push_back(g.gap);
      Marker m;
      m.x = static_cast<double>(g.step);
      m.y = g.gap;
      m.color = g.passed ? "#2a9d3c" : "#f0a020";
      m.css_class = g.passed ? "guard-pass" : "guard-fail";
      m.title =
          run.name + " guard check at step " + std::to_string(g.step) + ": gap " + percent(g.gap);
      plot.markers.push_back(m);
      if (g.action != "none" && !g.action.empty()) {
        plot.rules.push_back({m.x, "#d62020", "guard: " + g.action, "guard-action"});
      }
    }
    if (!guard.x.empty()) plot.series.push_back(std::move(guard));
  }
  plot.lines.push_back({0.0, "#444", "0"});
  plot.lines.push_back({tolerance, "#d62020", "guard tolerance"});
  return plot;
}

Plot throughput_plot(const std::vector<RunData>& runs) {
  Plot plot;
  plot.title = "Throughput";
  plot.x_label = "step";
  plot.y_label = "tokens/s";
  for (size_t i = 0; i < runs.size(); ++i) {
    Series s{label(runs[i]), palette_color(i), {}, {}};
    for (const RunRecord& r : runs[i].records) {
      s.x.push_back(static_cast<double>(r.step));
      s.y.push_back(r.tokens_per_s);
    }
    plot.series.push_back(std::move(s));
  }
  return plot;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::nan("");
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::string summary_table(const std::vector<RunData>& runs, size_t ref) {
  std::string out =
      "<table class=\"summary\"><tr><th>run</th><th>precision</th><th>steps</th>"
      "<th>final loss</th><th>last val loss</th><th>val gap to " +
      html_escape(runs[ref].name) +
      "</th><th>median tokens/s</th><th>wall s</th><th>skipped steps</th>"
      "<th>guard checks (failed)</th><th>guard actions</th></tr>\n";
  std::map<int64_t, double> ref_val;
  for (const RunRecord& r : runs[ref].records) {
    if (std::isfinite(r.val_loss)) ref_val[r.step] = r.val_loss;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = runs[i];
    double last_val = std::nan(""), gap = std::nan("");
    for (auto it = run.records.rbegin(); it != run.records.rend(); ++it) {
      if (!std::isfinite(it->val_loss)) continue;
      last_val = it->val_loss;
      const auto v = ref_val.find(it->step);
      if (v != ref_val.end()) gap = (last_val - v->second) / v->second;
      break;
    }
    std::vector<double> tps;
    int64_t skipped = 0;
    for (const RunRecord& r : run.records) {
      tps.push_back(r.tokens_per_s);
      skipped += r.skipped ? 1 : 0;
    }
    const std::vector<double> wall = run_wall_times(run);
    int64_t failed = 0;
    std::string actions;
    for (const GuardPoint& g : run.guard) {
      failed += g.passed ? 0 : 1;
      if (g.action != "none" && !g.action.empty()) {
        actions += (actions.empty() ? "" : ", ") + g.action + " at " + std::to_string(g.step);
      }
    }
    out += "<tr><td><span class=\"swatch\" style=\"background:" + palette_color(i) + "\"></span>" +
           html_escape(run.name) + "</td><td>" + html_escape(precision_path(run)) + "</td><td>" +
           std::to_string(run.records.back().step) + "</td><td>" + fmt(run.records.back().loss) +
           "</td><td>" + fmt(last_val) + "</td><td>" + (i == ref ? "reference" : percent(gap)) +
           "</td><td>" + fmt(median(tps), "%.0f") + "</td><td>" +
           (wall.empty() ? fmt(std::nan("")) : fmt(wall.back(), "%.1f")) + "</td><td>" +
           std::to_string(skipped) + "</td><td>" + std::to_string(run.guard.size()) + " (" +
           std::to_string(failed) + ")</td><td>" +
           (actions.empty() ? "none" : html_escape(actions)) + "</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string guard_section(const std::vector<RunData>& runs) {
  std::string out;
  for (const RunData& run : runs) {
    if (run.guard.empty() && run.warnings.empty()) continue;
    out += "<h3>" + html_escape(run.name) + "</h3>\n";
    if (!run.guard.empty()) {
      out +=
          "<table class=\"guard\"><tr><th>step</th><th>fp8 val loss</th><th>bf16 val loss</th>"
          "<th>gap</th><th>result</th><th>strikes</th><th>action</th></tr>\n";
      for (const GuardPoint& g : run.guard) {
        std::string action = g.action;
        if (g.rollback_step) action += " to step " + std::to_string(*g.rollback_step);
        out += std::string("<tr class=\"") + (g.passed ? "pass" : "fail") + "\"><td>" +
               std::to_string(g.step) + "</td><td>" + fmt(g.fp8_loss) + "</td><td>" +
               fmt(g.bf16_loss) + "</td><td>" + percent(g.gap) + "</td><td>" +
               (g.passed ? "passed" : "failed") + "</td><td>" + std::to_string(g.strikes) +
               "</td><td>" + html_escape(action) + "</td></tr>\n";
      }
      out += "</table>\n";
    }
    if (!run.warnings.empty()) {
      out += "<ul class=\"warnings\">\n";
      for (const auto& [step, text] : run.warnings) {
        out += "<li>step " + std::to_string(step) + ": " + html_escape(text) + "</li>\n";
      }
      out += "</ul>\n";
    }
  }
  return out.empty() ? "<p>No run has guard checks or warnings.</p>\n" : out;
}

std::string health_section(const std::vector<RunData>& runs) {
  std::string out;
  for (const RunData& run : runs) {
    if (run.health.rows.empty()) continue;
    for (const bool saturation : {true, false}) {
      Heatmap map;
      map.title = run.name + ": " +
                  (saturation ? "saturated (clamped to the format's max)"
                              : "underflow (nonzero values flushed to 0)");
      map.value_name = saturation ? "saturated" : "flushed";
      map.rows = run.health.rows;
      map.steps = run.health.steps;
      map.values = saturation ? run.health.saturated : run.health.flushed;
      out += "<div class=\"figure\">" + heatmap_svg(map) + "</div>\n";
    }
  }
  return out.empty() ? "<p>No run reports FP8 statistics (only fp8 runs do).</p>\n" : out;
}

std::string value_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string runs_section(const std::vector<RunData>& runs) {
  std::string out;
  for (const RunData& run : runs) {
    out += "<h3>" + html_escape(run.name) + "</h3>\n<p class=\"path\">" + html_escape(run.path) +
           "</p>\n";
    if (!run.info.is_object()) {
      out += "<p>No run.json (a run started before octet wrote one, or a bare metrics file).</p>\n";
      continue;
    }
    out += "<table class=\"info\">";
    for (const char* key : {"commit", "octet_version", "parameters", "tokens_per_step"}) {
      if (run.info.contains(key)) {
        out += "<tr><th>" + std::string(key) + "</th><td>" +
               html_escape(value_text(run.info[key])) + "</td></tr>";
      }
    }
    if (run.info.contains("machine") && run.info["machine"].is_object()) {
      for (const auto& [k, v] : run.info["machine"].items()) {
        out += "<tr><th>machine." + html_escape(k) + "</th><td>" + html_escape(value_text(v)) +
               "</td></tr>";
      }
    }
    out += "</table>\n";
    if (run.info.contains("config") && run.info["config"].is_object()) {
      out += "<div class=\"config\">";
      for (const auto& [k, v] : run.info["config"].items()) {
        out += "<span><b>" + html_escape(k) + "</b> " + html_escape(value_text(v)) + "</span>";
      }
      out += "</div>\n";
    }
  }
  return out;
}

const char* kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; background: #fff; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
tr.fail td { background: #fff1e0; }
.figure { margin: 10px 0; } svg { background: #fff; border: 1px solid #e4e4e4; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; }
.config { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; max-width: 1000px; }
.path, .note { font-size: 12px; color: #666; }
)";

}  // namespace

std::string render_report(const std::vector<RunData>& runs) {
  OCTET_CHECK(!runs.empty(), "report", "no runs to report");
  const size_t ref = reference_run(runs);
  std::string names;
  for (const RunData& r : runs) names += (names.empty() ? "" : ", ") + r.name;
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<title>octet report: " + html_escape(names) + "</title>\n<style>" + kStyle +
         "</style>\n</head>\n<body>\n";
  out += "<h1>octet run report</h1>\n<p>" + std::to_string(runs.size()) +
         " run(s): " + html_escape(names) + ". Gaps are relative to " +
         html_escape(label(runs[ref])) +
         ". Guard checks: green passed, orange failed; red triangles and dashed red lines are "
         "the guard's actions; purple lines are precision switches. Hover a mark for its "
         "numbers.</p>\n";
  out += "<h2>Summary</h2>\n" + summary_table(runs, ref);
  std::string note;
  out +=
      "<h2>Loss</h2>\n<div class=\"figure\">" + plot_svg(loss_plot(runs, false, note)) + "</div>\n";
  out += "<div class=\"figure\">" + plot_svg(loss_plot(runs, true, note)) + "</div>\n";
  if (!note.empty()) out += "<p class=\"note\">" + html_escape(note) + "</p>\n";
  out += "<div class=\"figure\">" + plot_svg(gap_plot(runs, ref)) + "</div>\n";
  out +=
      "<h2>Throughput</h2>\n<div class=\"figure\">" + plot_svg(throughput_plot(runs)) + "</div>\n";
  out += "<h2>Convergence guard</h2>\n" + guard_section(runs);
  out +=
      "<h2>FP8 health per layer</h2>\n<p class=\"note\">Rows are a layer's GEMM operands (x: "
      "input, w: weight, dy: output gradient); columns the steps that reported statistics. "
      "Grey: no value.</p>\n" +
      health_section(runs);
  out += "<h2>Runs</h2>\n" + runs_section(runs);
  out += "</body>\n</html>\n";
  return out;
}

void write_report(const std::vector<std::string>& run_paths, const std::string& out_path) {
  std::vector<RunData> runs;
  for (const std::string& p : run_paths) runs.push_back(load_run(p));
  write_file_atomic(out_path, render_report(runs));
}

}  // namespace octet::report
