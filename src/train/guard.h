// train/guard.h: the FP8 convergence guard's judgement: at each check the validation loss
// under the fp8 policy is compared with the loss under the bf16 policy on the same master
// weights; after `patience` consecutive checks where fp8 is worse by more than the
// tolerance, the configured action is due. Also: which checkpoint a rollback returns to.
// (The trainer runs the two evaluations and carries the actions out: train/trainer_guard.cpp.)
// defines: Guard, guard_action_name, guard_action_from_name, PassedCheckpoint,
//          last_passed_checkpoint
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "train/config.h"
#include "train/metrics.h"

namespace octet::train {

const char* guard_action_name(GuardAction a);
GuardAction guard_action_from_name(std::string_view name);  // "warn" | "fallback" | "rollback"

class Guard {
 public:
  // last_passed: whether the check before this run's start passed (a resumed run).
  explicit Guard(const GuardConfig& config, bool last_passed = false);

  // Whether a check is due after `step`; `eval` says whether the step is evaluated.
  bool due(int64_t step, bool eval) const;
  // Judges one check: the relative gap, pass or fail, the strikes, and the action due
  // (config.action when the strikes reach config.patience, then the strikes restart; else
  // "none"). A non-finite fp8 loss fails; so does a non-finite bf16 loss (the weights are
  // broken: the check cannot be passed).
  GuardRecord judge(double fp8_loss, double bf16_loss);
  // Whether the last check passed (false before any): what a checkpoint records.
  bool last_passed() const { return last_passed_; }
  const GuardConfig& config() const { return config_; }

 private:
  GuardConfig config_;
  int64_t strikes_ = 0;
  bool last_passed_ = false;
};

struct PassedCheckpoint {
  int64_t step = 0;
  std::string dir;  // the step directory
};

// The checkpoint in `out_dir` with the highest step <= max_step whose trainer state says
// the guard's last check before it passed, under fp8; nullopt when there is none.
std::optional<PassedCheckpoint> last_passed_checkpoint(const std::string& out_dir,
                                                       int64_t max_step);

}  // namespace octet::train
