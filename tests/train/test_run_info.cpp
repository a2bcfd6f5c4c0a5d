// tests/train/test_run_info.cpp: run.json, what a run directory says about the run: the
// config under the flags' names, the commit baked in at build time, and the machine.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/json.h"
#include "temp_dir.h"
#include "train/run_info.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {

TEST(RunInfo, ATrainerWithAnOutDirectoryWritesRunJsonBeforeItsFirstStep) {
  testing::TempDir dir;
  TrainConfig c = tiny_run(write_tiny64(dir), nn::Precision::fp8, 2);
  c.recipe = fp8::Recipe::parse("tensor-delayed");
  c.batch = 2;
  c.seq_len = 16;
  c.grad_accum = 3;
  c.out_dir = dir.file("run");
  Trainer trainer(c);  // no step run yet
  const std::string path = dir.file("run/run.json");
  ASSERT_TRUE(std::filesystem::exists(path));
  const Json j = read_json_file(path);
  const Json& config = j.at("config");
  EXPECT_EQ(config.at("precision"), "fp8");
  EXPECT_EQ(config.at("fp8_recipe"), "tensor-delayed");
  EXPECT_EQ(config.at("batch"), 2);
  EXPECT_EQ(config.at("seq_len"), 16);
  EXPECT_EQ(config.at("grad_accum"), 3);
  EXPECT_EQ(config.at("lr").get<double>(), 1e-2);
  EXPECT_EQ(config.at("out"), c.out_dir);
  EXPECT_EQ(config.at("guard"), "on");  // the default under fp8
  EXPECT_EQ(config.at("guard_tolerance").get<double>(), 0.005);
  EXPECT_EQ(config.at("guard_action"), "rollback");
  EXPECT_EQ(j.at("tokens_per_step"), 2 * 16 * 3);
  EXPECT_EQ(j.at("parameters"), trainer.model().parameter_count());
  EXPECT_EQ(j.at("commit"), build_commit());
  EXPECT_FALSE(build_commit().empty());
  EXPECT_EQ(j.at("octet_version"), OCTET_VERSION);
  const Json& machine = j.at("machine");
  EXPECT_FALSE(machine.at("cpu").get<std::string>().empty());
  EXPECT_GE(machine.at("cores").get<int64_t>(), 1);
  EXPECT_EQ(machine.at("device"), "cpu");
  EXPECT_TRUE(machine.at("gpus").is_array());
}

TEST(RunInfo, AResumedRunKeepsTheRunJsonOfItsFirstStart) {
  testing::TempDir dir;
  TrainConfig c = tiny_run(write_tiny64(dir), nn::Precision::bf16, 1);
  c.batch = 2;
  c.seq_len = 16;
  c.out_dir = dir.file("run");
  Trainer(c).run();
  c.resume = true;
  c.steps = 2;
  c.lr = 5e-3;
  Trainer resumed(c);
  EXPECT_EQ(read_json_file(dir.file("run/run.json")).at("config").at("lr").get<double>(), 1e-2);
}

}  // namespace
}  // namespace octet::train
