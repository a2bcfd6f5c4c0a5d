// tests/train/test_training.cpp: the trainer end to end on the CPU: convergence to the
// synthetic corpus' entropy floor under fp32, bf16 and fp8, exact resume, and bad input
// that must be refused without damaging an existing checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {
namespace fs = std::filesystem;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The final validation loss of the tiny model trained 300 steps on the synthetic corpus
// under `precision`, and that corpus' entropy floor.
std::pair<double, double> tiny_val_loss_and_floor(nn::Precision precision) {
  Trainer trainer(tiny_run("tiny", precision, 300));
  const auto records = trainer.run();
  EXPECT_FALSE(records.empty());
  EXPECT_TRUE(!records.empty() && records.back().val_loss.has_value());
  const double val = records.empty() ? 0.0 : records.back().val_loss.value_or(0.0);
  const double floor = *trainer.loss_floor();
  std::printf("[ result   ] %s val_loss %.4f (floor %.4f)\n", nn::precision_name(precision), val,
              floor);
  return {val, floor};
}

// The issue's criteria: every precision within 5% of the floor (no model beats the floor on
// average; the validation estimate over 8 x 512 tokens has a standard error of about 0.02
// nats, inside the 5% = 0.06 nats margin), and fp8 within 1% of bf16. Each run used to be
// one test of three runs; fp32 is now a test of its own so that `ctest -j` runs it beside
// the bf16 + fp8 pair, which the comparison needs in one process.
TEST(Training, Fp32ReachesTheEntropyFloor) {
  const auto [val, floor] = tiny_val_loss_and_floor(nn::Precision::fp32);
  EXPECT_LE(val, 1.05 * floor);
}

TEST(Training, Bf16AndFp8ReachTheEntropyFloorAndFp8StaysOnBf16) {
  const auto [bf16, floor] = tiny_val_loss_and_floor(nn::Precision::bf16);
  const auto [fp8, fp8_floor] = tiny_val_loss_and_floor(nn::Precision::fp8);
  EXPECT_EQ(floor, fp8_floor);  // one corpus
  EXPECT_LE(bf16, 1.05 * floor);
  EXPECT_LE(fp8, 1.05 * floor);
  EXPECT_LE(std::abs(fp8 - bf16), 0.01 * bf16);
}

TEST(Training, ResumingAfterCtrlCContinuesWithTheSameLosses) {
  testing::TempDir dir;
  const std::string model = write_tiny64(dir);
  // fp8 with delayed scaling: the run with the most state to carry over (AdamW moments,
  // data position, amax histories and scales).
  TrainConfig c = tiny_run(model, nn::Precision::fp8, 16);
  c.recipe = fp8::Recipe::parse("tensor-delayed");
  c.eval_every = 4;

  std::vector<double> straight;
  {
    Trainer trainer(c);
    for (const StepRecord& r : trainer.run()) straight.push_back(r.loss);
  }
  c.out_dir = dir.file("ckpt");
  {
    Trainer trainer(c);
    trainer.on_step = [](const StepRecord& r) {
      if (r.step == 7) request_stop();  // what Ctrl-C does
    };
    trainer.run();
    clear_stop_request();
    EXPECT_EQ(trainer.step(), 7);
  }
  c.resume = true;
  Trainer resumed(c);
  EXPECT_EQ(resumed.step(), 7);
  std::vector<double> rest;
  for (const StepRecord& r : resumed.run()) rest.push_back(r.loss);
  ASSERT_EQ(rest.size(), 9u);
  // Equal, not close: the resumed run must replay the same arithmetic.
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], straight[7 + i]) << "step " << 8 + i;
}

TEST(Training, BadInputIsRefusedAndLeavesTheCheckpointIntact) {
  testing::TempDir dir;
  const std::string model = write_tiny64(dir);
  TrainConfig c = tiny_run(model, nn::Precision::bf16, 2);
  c.out_dir = dir.file("ckpt");
  { Trainer(c).run(); }
  const std::string step_dir = latest_checkpoint(c.out_dir);
  const std::string weights = step_dir + "/model.safetensors";
  const std::string before = file_bytes(weights);

  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Resuming where there is no checkpoint names the missing file.
  TrainConfig none = c;
  none.out_dir = dir.file("empty");
  none.resume = true;
  expect_error([&] { Trainer t(none); }, "latest");
  // Resuming with another precision is refused.
  TrainConfig other = c;
  other.resume = true;
  other.precision = nn::Precision::fp8;
  expect_error([&] { Trainer t(other); }, "--precision");
  // So is resuming with another recipe knob (the recipe is compared whole).
  TrainConfig pow2 = c;
  pow2.resume = true;
  pow2.recipe = fp8::Recipe::parse("tensor-current:pow2");
  expect_error([&] { Trainer t(pow2); }, "and recipe tensor-current;");
  // FP8 gradient collectives in a run without FP8 are refused, naming the precision.
  TrainConfig comm = c;
  comm.fp8_comm = dist::Fp8Comm::grads;
  expect_error([&] { Trainer t(comm); }, "--fp8-comm grads needs --precision fp8");
  // A checkpoint from before the text form round-tripped ("tensor-current/hybrid") resumes.
  const std::string legacy = dir.file("legacy");
  fs::create_directories(legacy);
  fs::copy(step_dir, legacy + "/step_00000002");
  std::ofstream(legacy + "/latest") << "step_00000002\n";
  const std::string state_json = legacy + "/step_00000002/trainer_state.json";
  std::string text = file_bytes(state_json);
  const size_t at = text.find("\"tensor-current\"");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 16, "\"tensor-current/hybrid\"");
  std::ofstream(state_json, std::ios::trunc) << text;
  TrainConfig old = c;
  old.out_dir = legacy;
  old.resume = true;
  EXPECT_NO_THROW(Trainer{old});
  // An unknown config field and an impossible shape name the file and the field.
  std::ofstream(dir.file("typo.json")) << R"({"vocab_size": 64, "hiden_size": 64})";
  TrainConfig typo = c;
  typo.model = dir.file("typo.json");
  expect_error([&] { Trainer t(typo); }, "hiden_size");
  std::ofstream(dir.file("heads.json")) << R"({"vocab_size": 64, "hidden_size": 64,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 5})";
  TrainConfig heads = c;
  heads.model = dir.file("heads.json");
  expect_error([&] { Trainer t(heads); }, "num_attention_heads");
  // A truncated copy of the checkpoint is refused, naming the file.
  const std::string broken = dir.file("broken");
  fs::create_directories(broken);
  fs::copy(step_dir, broken + "/step_00000002");
  std::ofstream(broken + "/latest") << "step_00000002\n";
  fs::resize_file(broken + "/step_00000002/model.safetensors", before.size() / 2);
  TrainConfig truncated = c;
  truncated.out_dir = broken;
  truncated.resume = true;
  expect_error([&] { Trainer t(truncated); }, "model.safetensors");
  // None of this touched the good checkpoint.
  EXPECT_EQ(file_bytes(weights), before);
  EXPECT_EQ(latest_checkpoint(c.out_dir), step_dir);
}

}  // namespace
}  // namespace octet::train
