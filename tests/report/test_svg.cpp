// tests/report/test_svg.cpp: the report's SVG figures: round ticks, one stroke per series
// (broken where a value is missing or the steps go back), axis labels, markers with tooltips,
// escaping, thinning of long runs, and heatmap cells with their log colour scale.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "report/heatmap.h"
#include "report/svg.h"
#include "testing.h"

namespace octet::report {
namespace {

using testing::count;

// The d attribute of the first series path.
std::string first_path_d(const std::string& svg) {
  const size_t p = svg.find("<path class=\"series\"");
  const size_t d = svg.find(" d=\"", p) + 4;
  return svg.substr(d, svg.find('"', d) - d);
}

TEST(Svg, NiceTicksAreEvenlySpacedRoundNumbersInsideTheRange) {
  EXPECT_EQ(nice_ticks(0, 37, 5), (std::vector<double>{0, 10, 20, 30}));
  EXPECT_EQ(nice_ticks(1.2, 5.6, 5), (std::vector<double>{2, 3, 4, 5}));
  const std::vector<double> t = nice_ticks(-0.013, 0.041, 5);
  ASSERT_GE(t.size(), 3u);
  const double step = t[1] - t[0];
  EXPECT_NEAR(step, 0.01, 1e-15);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_GE(t[i], -0.013);
    EXPECT_LE(t[i], 0.041);
    if (i > 0) {
      EXPECT_NEAR(t[i] - t[i - 1], step, 1e-12);
    }
  }
  EXPECT_EQ(nice_ticks(2, 2), (std::vector<double>{2}));
  EXPECT_TRUE(nice_ticks(std::nan(""), 1).empty());
}

TEST(Svg, TickLabelsHaveTheDigitsTheirSpacingNeeds) {
  EXPECT_EQ(format_tick(2, 1), "2");
  EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(format_tick(0.005, 0.005, true), "0.5%");
  EXPECT_EQ(format_tick(0.1, 0.02, true), "10%");
}

TEST(Svg, APlotHasOneStrokePerSeriesItsAxisLabelsAndItsMarkers) {
  Plot p;
  p.title = "Loss against step";
  p.x_label = "step";
  p.y_label = "loss (nats/token)";
  p.series.push_back({"bf16", "#111111", {1, 2, 3, 4}, {4, 3, 2.5, 2}});
  p.series.push_back({"fp8", "#222222", {1, 2, 3}, {4.1, 3.1, 2.6}});
  p.markers.push_back({3, 2.6, "triangle", "#d62020", "guard-action", "rollback <to> step 2"});
  p.rules.push_back({3, "#d62020", "guard: rollback", "guard-action"});
  const std::string svg = plot_svg(p);
  EXPECT_EQ(svg.rfind("<svg class=\"plot\"", 0), 0u);
  EXPECT_EQ(count(svg, "<path class=\"series\""), 2u);
  EXPECT_EQ(count(svg, "<path class=\"marker guard-action\""), 1u);
  EXPECT_EQ(count(svg, "<line class=\"rule guard-action\""), 1u);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss (nats/token)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">Loss against step</text>"), std::string::npos);
  // The tooltip is escaped; the raw text would open an element.
  EXPECT_NE(svg.find("<title>rollback &lt;to&gt; step 2</title>"), std::string::npos);
  EXPECT_EQ(svg.find("<to>"), std::string::npos);
  // 4 points: one move and 3 line segments; legend entries for both series.
  const std::string d = first_path_d(svg);
  EXPECT_EQ(count(d, "M"), 1u);
  EXPECT_EQ(count(d, "L"), 3u);
  EXPECT_EQ(count(svg, "<g class=\"legend\">"), 2u);
  EXPECT_EQ(count(svg, "<svg"), count(svg, "</svg>"));
}

TEST(Svg, AMissingValueOrStepsGoingBackStartANewStroke) {
  Plot p;
  p.series.push_back({"run", "#111", {1, 2, 3, 4, 5, 3, 4}, {5, 4, std::nan(""), 3, 2, 2.5, 2.2}});
  const std::string d = first_path_d(plot_svg(p));
  // Strokes: 1-2, 4-5, then 3-4 after the rollback: 3 moves, 3 lines.
  EXPECT_EQ(count(d, "M"), 3u) << d;
  EXPECT_EQ(count(d, "L"), 3u) << d;
}

TEST(Svg, APlotWithoutFiniteValuesSaysSo) {
  Plot p;
  p.series.push_back({"run", "#111", {1, 2}, {std::nan(""), std::nan("")}});
  const std::string svg = plot_svg(p);
  EXPECT_NE(svg.find("no data"), std::string::npos);
  EXPECT_EQ(svg.find("<path class=\"series\""), std::string::npos);
}

TEST(Svg, LongSeriesAreThinnedToAboutOnePointPerPixel) {
  Plot p;
  Series s{"long", "#111", {}, {}};
  for (int i = 0; i < 100000; ++i) {
    s.x.push_back(i);
    s.y.push_back(std::sin(i * 1e-3));
  }
  p.series.push_back(s);
  const std::string d = first_path_d(plot_svg(p));
  EXPECT_LE(count(d, "L"), static_cast<size_t>(p.width));
  EXPECT_GE(count(d, "L"), 100u);
}

TEST(Heatmap, OneCellPerValueColouredOnALogScale) {
  Heatmap m;
  m.title = "saturated";
  m.value_name = "saturated";
  m.rows = {"layers.0.qkv x", "layers.0.qkv dy"};
  m.steps = {10, 20, 30};
  m.values = {0.0, 1e-6, 0.1, std::nan(""), std::pow(10.0, -3.5), 0.5};
  const std::string svg = heatmap_svg(m);
  EXPECT_EQ(count(svg, "<rect class=\"cell\""), 5u);  // the NaN has no cell
  EXPECT_NE(svg.find("data-row=\"layers.0.qkv dy\" data-step=\"30\" data-value=\"0.5\""),
            std::string::npos);
  EXPECT_NE(svg.find(">layers.0.qkv x</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  // The scale's ends and middle: the three stops of heat_color; beyond hi clamps to it.
  EXPECT_EQ(heat_color(1e-6, 1e-6, 1e-1), "#fff0a0");
  EXPECT_EQ(heat_color(std::pow(10.0, -3.5), 1e-6, 1e-1), "#f07828");
  EXPECT_EQ(heat_color(0.1, 1e-6, 1e-1), "#780014");
  EXPECT_EQ(heat_color(0.5, 1e-6, 1e-1), "#780014");
  EXPECT_EQ(heat_color(0.0, 1e-6, 1e-1), "#e8f3e8");
  EXPECT_NE(svg.find("fill=\"#780014\"><title>layers.0.qkv x, step 30: saturated 0.1</title>"),
            std::string::npos);
}

TEST(Heatmap, LongRunsAreBinnedToTheWorstValueOfEachBin) {
  Heatmap m;
  m.rows = {"r"};
  for (int s = 1; s <= 400; ++s) {
    m.steps.push_back(s);
    m.values.push_back(s == 200 ? 0.05 : 0.0);
  }
  m.max_columns = 160;  // 3 steps a bin: 134 bins
  const std::string svg = heatmap_svg(m);
  EXPECT_EQ(count(svg, "<rect class=\"cell\""), 134u);
  // Step 200 falls in the bin of steps 199-201.
  EXPECT_NE(svg.find("data-step=\"199\" data-value=\"0.05\""), std::string::npos);
  EXPECT_NE(svg.find("steps 199-201 (max)"), std::string::npos);
}

}  // namespace
}  // namespace octet::report
