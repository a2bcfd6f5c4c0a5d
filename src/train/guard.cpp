// train/guard.cpp
#include "train/guard.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "train/checkpoint.h"

namespace octet::train {

const char* guard_action_name(GuardAction a) {
  switch (a) {
    case GuardAction::warn:
      return "warn";
    case GuardAction::fallback:
      return "fallback";
    case GuardAction::rollback:
      return "rollback";
  }
  return "?";
}

GuardAction guard_action_from_name(std::string_view name) {
  if (name == "warn") return GuardAction::warn;
  if (name == "fallback") return GuardAction::fallback;
  if (name == "rollback") return GuardAction::rollback;
  OCTET_FAIL("guard", "unknown guard action '", name, "'; expected warn, fallback or rollback");
}

Guard::Guard(const GuardConfig& config, bool last_passed)
    : config_(config), last_passed_(last_passed) {
  OCTET_CHECK(config.every >= 0 && config.patience >= 1 && config.tolerance >= 0.0, "guard",
              "--guard-every must be >= 0, --guard-patience >= 1 and --guard-tolerance >= 0");
}

bool Guard::due(int64_t step, bool eval) const {
  return config_.every > 0 ? step % config_.every == 0 : eval;
}

GuardRecord Guard::judge(double fp8_loss, double bf16_loss) {
  GuardRecord g;
  g.fp8_loss = fp8_loss;
  g.bf16_loss = bf16_loss;
  g.gap = (fp8_loss - bf16_loss) / bf16_loss;
  // Written so that a NaN on either side fails.
  g.passed = std::isfinite(fp8_loss) && std::isfinite(bf16_loss) &&
             fp8_loss <= bf16_loss * (1.0 + config_.tolerance);
  strikes_ = g.passed ? 0 : strikes_ + 1;
  last_passed_ = g.passed;
  g.strikes = strikes_;
  if (strikes_ >= config_.patience) {
    g.action = guard_action_name(config_.action);
    strikes_ = 0;
  }
  return g;
}

std::optional<PassedCheckpoint> last_passed_checkpoint(const std::string& out_dir,
                                                       int64_t max_step) {
  namespace fs = std::filesystem;
  std::optional<PassedCheckpoint> best;
  std::error_code ec;
  if (out_dir.empty() || !fs::is_directory(out_dir, ec)) return best;
  for (const fs::directory_entry& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    // step_NNNNNNNN exactly: not the temporary directories of a checkpoint being written.
    if (name.rfind("step_", 0) != 0 || name.find('.') != std::string::npos) continue;
    if (!fs::exists(e.path() / "trainer_state.json")) continue;
    const TrainerState s = read_trainer_state(e.path().string());
    if (!s.guard_passed || s.precision != "fp8" || s.step > max_step) continue;
    if (!best || s.step > best->step) best = PassedCheckpoint{s.step, e.path().string()};
  }
  return best;
}

}  // namespace octet::train
