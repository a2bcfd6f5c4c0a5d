// train/retention.cpp: checkpoint retention and the clean-up of stale temporary folders.
#include "train/retention.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"
#include "train/run_links.h"

namespace octet::train {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "step_";
constexpr std::string_view kTemp = ".tmp-";

// A non-negative decimal number filling all of `s`.
std::optional<int64_t> parse_number(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::string latest_name(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir + "/latest", ec)) return {};
  std::string name = read_text_file(dir + "/latest");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

}  // namespace

std::optional<int64_t> checkpoint_step_of(const std::string& name) {
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  return parse_number(std::string_view(name).substr(kPrefix.size()));
}

std::vector<std::string> prune_checkpoints(const std::string& dir, const RetentionPolicy& policy,
                                           const std::vector<std::string>& also_keep) {
  OCTET_CHECK(policy.keep_last >= 0 && policy.keep_every >= 0, "checkpoint",
              "--keep-last and --keep-every must be >= 0");
  std::vector<std::string> deleted;
  if (policy.keep_last == 0) return deleted;
  const std::string latest = latest_name(dir);
  if (latest.empty()) return deleted;
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::optional<int64_t> step = checkpoint_step_of(name);
    if (step && e.is_directory(ec)) steps.emplace_back(*step, name);
  }
  OCTET_CHECK(!ec, "checkpoint", dir, ": cannot list the checkpoints: ", ec.message());
  std::sort(steps.begin(), steps.end(), std::greater<>());
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, name] = steps[i];
    const bool keep = static_cast<int64_t>(i) < policy.keep_last || name == latest ||
                      (policy.keep_every > 0 && step % policy.keep_every == 0) ||
                      std::find(also_keep.begin(), also_keep.end(), name) != also_keep.end();
    if (keep) continue;
    const std::string path = dir + "/" + name;
    fs::remove_all(path, ec);
    OCTET_CHECK(!ec, "checkpoint", path, ": cannot delete an old checkpoint: ", ec.message());
    deleted.push_back(path);
  }
  return deleted;
}

std::vector<std::string> remove_stale_temp_dirs(const std::string& dir) {
  std::vector<std::string> deleted;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return deleted;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(kTemp);
    if (at == std::string::npos) continue;
    // A step folder being written, or the run directory's link being replaced
    // (train/run_links.h: .<file>.tmp-PID, a symlink until it is renamed over <file>).
    const std::string stem = name.substr(0, at);
    const bool step = checkpoint_step_of(stem).has_value();
    const bool link = std::any_of(kRunLinkedFiles.begin(), kRunLinkedFiles.end(),
                                  [&](const char* f) { return stem == "." + std::string(f); });
    if (!step && !link) continue;
    const std::optional<int64_t> pid =
        parse_number(std::string_view(name).substr(at + kTemp.size()));
    if (!pid || *pid <= 0 || *pid > 0x7fffffff) continue;
    if (step ? !e.is_directory(ec) : !e.is_symlink(ec)) continue;
    const bool mine = *pid == ::getpid();
    // EPERM means the process exists (another user's): keep its folder.
    const bool gone = ::kill(static_cast<pid_t>(*pid), 0) != 0 && errno == ESRCH;
    if (!mine && !gone) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    OCTET_CHECK(!rm, "checkpoint", e.path().string(),
                ": cannot delete a stale temporary checkpoint: ", rm.message());
    deleted.push_back(e.path().string());
  }
  OCTET_CHECK(!ec, "checkpoint", dir, ": cannot list the checkpoints: ", ec.message());
  return deleted;
}

}  // namespace octet::train
