// tests/report/test_report.cpp: `octet report` on fixed runs (tests/report/fixtures: a bf16
// run, an fp8 run whose guard failed twice and rolled back to bf16, and a metrics file in the
// older format without run.json, precision, wall_s or guard): what is read, and what the page
// shows: every curve, the guard's marks, the heatmap cells, run.json's facts, and nothing
// fetched from elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "core/error.h"
#include "report/report.h"
#include "temp_dir.h"
#include "testing.h"

namespace octet::report {
namespace {

const std::string kFixtures = OCTET_REPORT_FIXTURES;

using testing::count;

TEST(ReportRuns, AnFp8RunWithGuardChecksAndHealthIsReadCompletely) {
  const RunData run = load_run(kFixtures + "/fp8");
  EXPECT_EQ(run.name, "fp8");
  EXPECT_EQ(run.precision(), "fp8");
  ASSERT_EQ(run.records.size(), 60u);  // 30 steps of fp8, then steps 11-40 again after rollback
  EXPECT_EQ(run.records[30].step, 11);
  EXPECT_EQ(run.records[30].precision, "bf16");
  EXPECT_TRUE(run.records[16].skipped);
  EXPECT_TRUE(std::isnan(run.records[16].loss));  // null in the file
  ASSERT_EQ(run.guard.size(), 3u);
  EXPECT_TRUE(run.guard[0].passed);
  EXPECT_FALSE(run.guard[2].passed);
  EXPECT_EQ(run.guard[2].strikes, 2);
  EXPECT_EQ(run.guard[2].action, "rollback");
  EXPECT_EQ(run.guard[2].rollback_step, 10);
  EXPECT_EQ(run.guard[2].record, 29u);
  ASSERT_EQ(run.warnings.size(), 1u);
  EXPECT_EQ(run.warnings[0].first, 22);
  // 4 layers x 3 operands, each of the 30 fp8 steps.
  ASSERT_EQ(run.health.rows.size(), 12u);
  EXPECT_EQ(run.health.rows[11], "layers.1.down dy");
  ASSERT_EQ(run.health.steps.size(), 30u);
  EXPECT_EQ(run.health.at(run.health.flushed, 11, 21), 0.021);  // step 22
  const std::vector<double> wall = run_wall_times(run);
  ASSERT_EQ(wall.size(), 60u);
  EXPECT_EQ(wall[0], 0.08);
  EXPECT_EQ(run.info.at("commit"), "v0.1-42-gabc1234");
}

TEST(ReportRuns, AnOlderMetricsFileIsReadWithWhatItHas) {
  const RunData run = load_run(kFixtures + "/old_format.jsonl");
  EXPECT_EQ(run.name, "old_format");
  EXPECT_EQ(run.precision(), "");
  EXPECT_TRUE(run.info.is_null());
  EXPECT_EQ(run.records.size(), 20u);
  EXPECT_TRUE(run.guard.empty());
  EXPECT_EQ(run.health.rows.size(), 4u);  // per layer, no operands
  EXPECT_EQ(run.health.steps, (std::vector<int64_t>{10, 20}));
  EXPECT_TRUE(run_wall_times(run).empty());  // neither wall_s nor tokens_per_step
}

TEST(ReportRuns, WallTimeIsDerivedFromThroughputWhenTheRecordsLackIt) {
  testing::TempDir dir;
  std::ofstream(dir.file("run.json")) << R"({"tokens_per_step": 100})";
  std::ofstream(dir.file("metrics.jsonl")) << "{\"step\":1,\"loss\":3,\"tokens_per_s\":50}\n{"
                                              "\"step\":2,\"loss\":2,\"tokens_per_s\":200}\n";
  const RunData run = load_run(dir.path().string());
  EXPECT_EQ(run_wall_times(run), (std::vector<double>{2.0, 2.5}));
}

TEST(ReportRuns, ADirectoryWithoutMetricsOrABadLineIsAnErrorNamingTheFile) {
  testing::TempDir dir;
  try {
    load_run(dir.path().string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[report]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("no metrics file"), std::string::npos);
  }
  std::ofstream(dir.file("metrics.jsonl")) << "{\"step\":1,\"loss\":3}\n{\"step\":2,\n";
  try {
    load_run(dir.path().string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:2"), std::string::npos) << e.what();
  }
}

class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    html_ =
        new std::string(render_report({load_run(kFixtures + "/bf16"), load_run(kFixtures + "/fp8"),
                                       load_run(kFixtures + "/old_format.jsonl")}));
  }
  static void TearDownTestSuite() { delete html_; }
  static std::string* html_;
};
std::string* Report::html_ = nullptr;

TEST_F(Report, IsOneSelfContainedHtmlDocument) {
  const std::string& h = *html_;
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(h.find("</html>"), std::string::npos);
  // Nothing to fetch: no scripts, links, external images or URLs at all.
  for (const char* s : {"<script", "<link", " src=", "http://", "https://", "@import"}) {
    EXPECT_EQ(h.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(count(h, "<svg"), count(h, "</svg>"));
}

TEST_F(Report, PlotsLossAgainstStepAndWallTimeTheGapAndThroughput) {
  const std::string& h = *html_;
  EXPECT_EQ(count(h, "<svg class=\"plot\""), 4u);
  for (const char* title : {">Loss against step</text>", ">Loss against wall time</text>",
                            ">Relative gap to bf16</text>", ">Throughput</text>"}) {
    EXPECT_NE(h.find(title), std::string::npos) << title;
  }
  for (const char* axis : {">step</text>", ">wall time (s)</text>", ">loss (nats/token)</text>",
                           ">loss gap (relative)</text>", ">tokens/s</text>"}) {
    EXPECT_NE(h.find(axis), std::string::npos) << axis;
  }
  // Loss against step: a train line per run, plus the fp8 run's second stroke after its
  // rollback (one path, two moves); against wall time, the older run has no line (no wall_s).
  EXPECT_EQ(count(h, "<path class=\"series\" data-label=\"fp8 train\""), 2u);  // step, wall
  EXPECT_EQ(count(h, "<path class=\"series\" data-label=\"bf16 train\""), 2u);
  EXPECT_EQ(count(h, "<path class=\"series\" data-label=\"old_format train\""), 1u);
  // The gap plot: the training-loss gap of 10-step means, one line per run but the reference.
  EXPECT_EQ(count(h, "data-label=\"fp8 train (10-step mean)\""), 1u);
  EXPECT_EQ(count(h, "data-label=\"old_format train (10-step mean)\""), 1u);
  EXPECT_EQ(count(h, "<path class=\"series\" data-label=\"fp8 guard gap\""), 1u);
  EXPECT_NE(h.find("old_format has no wall_s"), std::string::npos);
}

TEST_F(Report, MarksTheGuardsChecksAndActionsOnTheCurves) {
  const std::string& h = *html_;
  // 3 checks on the loss-vs-step, loss-vs-wall and gap plots: 1 passed and 2 failed each.
  EXPECT_EQ(count(h, "class=\"marker guard-pass\""), 3u);
  EXPECT_EQ(count(h, "class=\"marker guard-fail\""), 6u);
  // The rollback: a triangle on both loss plots, a rule on all three.
  EXPECT_EQ(count(h, "<path class=\"marker guard-action\""), 2u);
  EXPECT_EQ(count(h, "<line class=\"rule guard-action\""), 3u);
  EXPECT_NE(h.find("guard: rollback to step 10"), std::string::npos);
  EXPECT_EQ(count(h, "<line class=\"rule precision-switch\""), 2u);  // step and wall plots
  EXPECT_NE(h.find("<title>fp8 guard check at step 20: fp8 1.7406, bf16 1.6806, gap +3.57% "
                   "(failed, strike 1)</title>"),
            std::string::npos);
  // The guard's table and the warning.
  EXPECT_NE(h.find("<td>rollback to step 10</td>"), std::string::npos);
  EXPECT_NE(h.find("step 22: layers.1.down dy: 2.1% of values flushed to zero"), std::string::npos);
}

TEST_F(Report, HasAHeatmapOfSaturationAndOfUnderflowPerFp8Run) {
  const std::string& h = *html_;
  EXPECT_EQ(count(h, "<svg class=\"heatmap\""), 4u);  // fp8 and old_format, 2 each
  EXPECT_NE(h.find(">fp8: saturated (clamped to the format&#39;s max)</text>"), std::string::npos);
  EXPECT_NE(h.find(">fp8: underflow (nonzero values flushed to 0)</text>"), std::string::npos);
  // fp8: 12 rows x 30 steps in each of its two maps; old_format: 4 x 2.
  EXPECT_EQ(count(h, "<rect class=\"cell\""), 2u * 12 * 30 + 2u * 4 * 2);
  EXPECT_NE(h.find("data-row=\"layers.1.down dy\" data-step=\"22\" data-value=\"0.021\""),
            std::string::npos);
}

TEST_F(Report, ShowsEachRunsConfigCommitAndMachine) {
  const std::string& h = *html_;
  EXPECT_NE(h.find("<th>commit</th><td>v0.1-42-gabc1234</td>"), std::string::npos);
  EXPECT_NE(h.find("<th>machine.cpu</th><td>Fixture CPU 9000</td>"), std::string::npos);
  EXPECT_NE(h.find("<span><b>fp8_recipe</b> tensor-current</span>"), std::string::npos);
  EXPECT_NE(h.find("No run.json"), std::string::npos);  // old_format
  // The summary: the guard switched the fp8 run to bf16 and rolled back once.
  EXPECT_NE(h.find("<td>fp8 \xe2\x86\x92 bf16</td>"), std::string::npos);
  EXPECT_NE(h.find("<td>rollback at 30</td>"), std::string::npos);
  EXPECT_NE(h.find("<td>3 (2)</td>"), std::string::npos);
}

TEST(ReportFile, IsWrittenFromRunPaths) {
  testing::TempDir dir;
  const std::string out = dir.file("report.html");
  write_report({kFixtures + "/bf16", kFixtures + "/fp8"}, out);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("octet run report"), std::string::npos);
  EXPECT_THROW(write_report({}, out), Error);
}

}  // namespace
}  // namespace octet::report
