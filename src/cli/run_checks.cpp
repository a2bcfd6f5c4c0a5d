// cli/run_checks.cpp
#include "cli/run_checks.h"

#include <filesystem>

#include "core/device.h"
#include "core/error.h"

namespace octet::cli {
namespace fs = std::filesystem;

void check_device_present(const std::string& command, const std::string& device) {
  const Device d = device_from_name(device);
  if (!d.is_cuda()) return;
  OCTET_CHECK(cuda_compiled(), command.c_str(), "--device ", device,
              ": this octet was built without CUDA (no nvcc at configure time); use --device "
              "cpu, or rebuild on a machine with the CUDA toolkit");
  const int count = cuda_device_count();
  OCTET_CHECK(d.index < count, command.c_str(), "--device ", device, ": this machine has ", count,
              " visible GPU(s)",
              count == 0 ? "" : " (cuda:0 to cuda:" + std::to_string(count - 1) + ")",
              "; use --device cpu");
}

bool holds_checkpoints(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (fs::exists(fs::path(dir) / "latest", ec)) return true;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec) && e.path().filename().string().starts_with("step_")) return true;
  }
  return false;
}

void check_out_dir(const train::TrainConfig& c, bool overwrite) {
  OCTET_CHECK(!(overwrite && c.resume), "train",
              "--resume continues the run in --out and --overwrite deletes it: give one of them");
  if (c.out_dir.empty() || c.resume || !holds_checkpoints(c.out_dir)) return;
  OCTET_CHECK(overwrite, "train", "--out ", c.out_dir,
              " already holds checkpoints of a run: continue it with --resume, or delete them "
              "and start over with --overwrite (or choose another --out)");
  // --overwrite: the checkpoints go, and the files that pointed at them; anything else stays.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(c.out_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = name.starts_with("step_") || name == "latest" ||
                      (e.is_symlink(ec) && (name == "config.json" || name == "model.safetensors" ||
                                            name == "tokenizer.model"));
    if (ours) fs::remove_all(e.path(), ec);
    OCTET_CHECK(!ec, "train", "--overwrite: cannot delete ", e.path().string(), ": ", ec.message());
  }
}

}  // namespace octet::cli
