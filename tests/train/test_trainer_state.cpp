// tests/train/test_trainer_state.cpp: trainer_state.json as a resume reads it: the fields a
// checkpoint writes come back, and a damaged file is refused naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/json.h"
#include "temp_dir.h"
#include "train/checkpoint.h"

namespace octet::train {
namespace {

const char* kGood = R"({"step": 12, "data_epoch": 1, "data_index": 7, "precision": "fp8",
  "recipe": "tensor-delayed", "parameters": 100})";

TEST(TrainerStateJson, ReadsTheFieldsACheckpointWrites) {
  const TrainerState s = trainer_state_from_json(parse_json(kGood), "ts.json", 100);
  EXPECT_EQ(s.step, 12);
  EXPECT_EQ(s.data_position, (data::LoaderPosition{1, 7}));
  EXPECT_EQ(s.precision, "fp8");
  EXPECT_EQ(s.recipe, "tensor-delayed");
}

TEST(TrainerStateJson, RefusesNegativePositionsAndAnotherModel) {
  for (const char* field : {"step", "data_epoch", "data_index"}) {
    Json js = parse_json(kGood);
    js[field] = -1;
    try {
      trainer_state_from_json(js, "ts.json", 100);
      FAIL() << field << " = -1 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ts.json: step, data_epoch and data_index must be >= 0"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(trainer_state_from_json(parse_json(kGood), "ts.json", 101), Error);
  Json extra = parse_json(kGood);
  extra["stepp"] = 1;
  EXPECT_THROW(trainer_state_from_json(extra, "ts.json", 100), Error);
}

// Found by fuzz/fuzz_trainer_state.cpp: a `latest` naming something longer than NAME_MAX made
// std::filesystem throw its own error (octet exit code 3) instead of an octet::Error.
TEST(LatestFile, ANameThatIsNoStepDirectoryIsRefusedNamingTheFile) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("step_00000002"));
  for (const std::string& bad : {std::string(300, 'a'), std::string("../elsewhere"),
                                 std::string("step_2x"), std::string("")}) {
    std::ofstream(dir.file("latest")) << bad << "\n";
    try {
      latest_checkpoint(dir.path().string());
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("latest") + ": expected a step directory name"),
                std::string::npos)
          << e.what();
    }
  }
  std::ofstream(dir.file("latest")) << "step_00000002\n";
  EXPECT_EQ(latest_checkpoint(dir.path().string()), dir.file("step_00000002"));
  std::ofstream(dir.file("latest")) << "step_00000004\n";
  EXPECT_THROW(latest_checkpoint(dir.path().string()), Error);
}

}  // namespace
}  // namespace octet::train
