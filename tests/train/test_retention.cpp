// tests/train/test_retention.cpp: checkpoint retention (--keep-last, --keep-every, `latest`
// always kept), the clean-up of stale step_*.tmp-PID folders (never a live writer's), and
// both on a real training run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/retention.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {
namespace fs = std::filesystem;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Fake checkpoints: a folder with one file, as prune_checkpoints only looks at names.
void make_steps(const testing::TempDir& dir, std::initializer_list<int64_t> steps, int64_t latest) {
  for (int64_t s : steps) {
    fs::create_directories(dir.file(step_name(s)));
    std::ofstream(dir.file(step_name(s) + "/model.safetensors")) << "x";
  }
  std::ofstream(dir.file("latest")) << step_name(latest) << "\n";
}

// The sorted names of the folders in dir.
std::vector<std::string> folders(const testing::TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    if (e.is_directory()) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Retention, StepNamesParseOnlyWhenWhole) {
  EXPECT_EQ(checkpoint_step_of("step_00000012"), 12);
  EXPECT_EQ(checkpoint_step_of("step_7"), 7);
  EXPECT_FALSE(checkpoint_step_of("step_00000012.tmp-123"));
  EXPECT_FALSE(checkpoint_step_of("step_"));
  EXPECT_FALSE(checkpoint_step_of("step_-1"));
  EXPECT_FALSE(checkpoint_step_of("latest"));
  EXPECT_FALSE(checkpoint_step_of("step_99999999999999999999999"));
}

TEST(Retention, KeepLastKeepsTheNewestByStepAndLatest) {
  testing::TempDir dir;
  make_steps(dir, {2, 4, 6, 8, 10, 12}, 12);
  std::ofstream(dir.file("step_notanumber.txt")) << "kept: not a checkpoint";
  const auto deleted = prune_checkpoints(dir.path().string(), {.keep_last = 3, .keep_every = 0});
  EXPECT_EQ(deleted.size(), 3u);
  EXPECT_EQ(folders(dir), (std::vector<std::string>{step_name(8), step_name(10), step_name(12)}));
  EXPECT_TRUE(fs::exists(dir.file("step_notanumber.txt")));
}

TEST(Retention, KeepEveryAddsMilestones) {
  testing::TempDir dir;
  make_steps(dir, {2, 4, 6, 8, 10, 12, 14}, 14);
  prune_checkpoints(dir.path().string(), {.keep_last = 2, .keep_every = 5});
  EXPECT_EQ(folders(dir), (std::vector<std::string>{step_name(10), step_name(12), step_name(14)}));
  prune_checkpoints(dir.path().string(), {.keep_last = 1, .keep_every = 4});
  EXPECT_EQ(folders(dir), (std::vector<std::string>{step_name(12), step_name(14)}));
}

TEST(Retention, LatestIsKeptEvenWhenOlderThanTheNewestN) {
  // A fresh run into a folder that holds a longer earlier run: `latest` names step 2.
  testing::TempDir dir;
  make_steps(dir, {2, 50, 60, 70}, 2);
  prune_checkpoints(dir.path().string(), {.keep_last = 1, .keep_every = 0});
  EXPECT_EQ(folders(dir), (std::vector<std::string>{step_name(2), step_name(70)}));
  EXPECT_NO_THROW(latest_checkpoint(dir.path().string()));
}

TEST(Retention, KeepLastZeroOrNoLatestDeletesNothing) {
  testing::TempDir dir;
  make_steps(dir, {1, 2, 3, 4}, 4);
  EXPECT_TRUE(prune_checkpoints(dir.path().string(), {.keep_last = 0, .keep_every = 0}).empty());
  fs::remove(dir.file("latest"));
  EXPECT_TRUE(prune_checkpoints(dir.path().string(), {.keep_last = 1, .keep_every = 0}).empty());
  EXPECT_EQ(folders(dir).size(), 4u);
  EXPECT_THROW(prune_checkpoints(dir.path().string(), {.keep_last = -1, .keep_every = 0}), Error);
}

// A pid that is surely not running: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(Retention, StaleTempFoldersGoAndLiveWritersStay) {
  testing::TempDir dir;
  const pid_t dead = dead_pid();
  const std::string stale = "step_00000004.tmp-" + std::to_string(dead);
  const std::string mine = "step_00000006.tmp-" + std::to_string(::getpid());
  const std::string live = "step_00000008.tmp-1";  // init: alive (ESRCH is never its answer)
  const std::string parent = "step_00000010.tmp-" + std::to_string(::getppid());
  const std::string odd = "step_00000012.tmp-abc";
  for (const auto& n : {stale, mine, live, parent, odd}) fs::create_directories(dir.file(n));
  const auto deleted = remove_stale_temp_dirs(dir.path().string());
  EXPECT_EQ(deleted.size(), 2u);
  EXPECT_FALSE(fs::exists(dir.file(stale)));
  EXPECT_FALSE(fs::exists(dir.file(mine)));
  EXPECT_TRUE(fs::exists(dir.file(live)));
  EXPECT_TRUE(fs::exists(dir.file(parent)));
  EXPECT_TRUE(fs::exists(dir.file(odd)));
  EXPECT_TRUE(remove_stale_temp_dirs(dir.file("missing")).empty());
}

// A kill between creating the run directory's new link and renaming it over the old one
// leaves .<file>.tmp-PID, a symlink: it goes with its dead writer; a live writer's stays,
// and so does a user's regular file of such a name.
TEST(Retention, StaleRunLinkTemporariesGoAndLiveWritersStay) {
  testing::TempDir dir;
  const std::string stale = ".model.safetensors.tmp-" + std::to_string(dead_pid());
  const std::string live = ".config.json.tmp-1";
  const std::string users = ".tokenizer.model.tmp-" + std::to_string(dead_pid());
  const std::string other = ".notes.txt.tmp-" + std::to_string(dead_pid());
  for (const auto& n : {stale, live, other})
    fs::create_symlink("step_00000002/model.safetensors", dir.file(n));
  { std::ofstream(dir.file(users)) << "mine"; }
  const auto deleted = remove_stale_temp_dirs(dir.path().string());
  ASSERT_EQ(deleted.size(), 1u);
  EXPECT_EQ(fs::path(deleted[0]).filename().string(), stale);
  EXPECT_FALSE(fs::is_symlink(dir.file(stale)));
  EXPECT_TRUE(fs::is_symlink(dir.file(live)));
  EXPECT_TRUE(fs::is_symlink(dir.file(other)));
  EXPECT_TRUE(fs::exists(dir.file(users)));
}

TEST(Retention, ATrainingRunKeepsTheNewestAndMilestonesAndCleansUpAtStart) {
  testing::TempDir dir;
  TrainConfig c = tiny_run(write_tiny64(dir), nn::Precision::bf16, 12);
  c.batch = 2;
  c.seq_len = 16;
  c.out_dir = dir.file("run");
  c.checkpoint_every = 1;
  c.retention = {.keep_last = 2, .keep_every = 5};
  fs::create_directories(c.out_dir);
  const std::string stale = c.out_dir + "/step_00000003.tmp-" + std::to_string(dead_pid());
  fs::create_directories(stale);
  Trainer(c).run();
  EXPECT_FALSE(fs::exists(stale));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(c.out_dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  // Beside the checkpoints: run.json and the HF links into the newest (train/run_links.h).
  EXPECT_EQ(names,
            (std::vector<std::string>{"config.json", "latest", "model.safetensors", "run.json",
                                      step_name(5), step_name(10), step_name(11), step_name(12)}));
  EXPECT_EQ(latest_checkpoint(c.out_dir), c.out_dir + "/" + step_name(12));
}

}  // namespace
}  // namespace octet::train
