// train/run_info.cpp
#include "train/run_info.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "io/json.h"
#include "octet_commit.h"  // generated at build time by cmake/commit.cmake: OCTET_COMMIT
#include "train/guard.h"

namespace octet::train {
namespace fs = std::filesystem;
namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The value of the first "key : value" line of `path` whose key is one of `keys`, or "".
std::string first_field(const std::string& path, std::initializer_list<const char*> keys) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trimmed(line.substr(0, colon));
    for (const char* k : keys) {
      if (key == k) return trimmed(line.substr(colon + 1));
    }
  }
  return {};
}

}  // namespace

Json train_config_json(const TrainConfig& c) {
  Json j = Json::object();
  j["model"] = c.model;
  j["precision"] = nn::precision_name(c.precision);
  j["fp8_recipe"] = c.recipe.str();
  j["device"] = c.device;
  j["data"] = c.data.source;
  if (c.data.source == "synthetic") {
    j["markov_vocab"] = c.data.markov_vocab;
    j["markov_order"] = c.data.markov_order;
    j["markov_support_min"] = c.data.markov_support_min;
    j["markov_support_max"] = c.data.markov_support_max;
    j["markov_seed"] = c.data.markov_seed;
    j["train_tokens"] = c.data.train_tokens;
    j["val_tokens"] = c.data.val_tokens;
  }
  j["batch"] = c.batch;
  j["seq_len"] = c.seq_len;
  j["grad_accum"] = c.grad_accum;
  j["steps"] = c.steps;
  j["lr"] = c.lr;
  j["min_lr_ratio"] = c.min_lr_ratio;
  j["warmup"] = c.warmup;
  j["weight_decay"] = c.weight_decay;
  j["beta1"] = c.beta1;
  j["beta2"] = c.beta2;
  j["eps"] = c.eps;
  j["grad_clip"] = c.grad_clip;
  j["seed"] = c.seed;
  j["eval_every"] = c.eval_every;
  j["eval_batches"] = c.eval_batches;
  j["checkpoint_every"] = c.checkpoint_every;
  j["log_every"] = c.log_every;
  j["out"] = c.out_dir;
  j["metrics"] = c.metrics;
  j["resume"] = c.resume;
  // The guard as the run resolved it: on by default under fp8 only.
  j["guard"] = c.guard.enabled.value_or(c.precision == nn::Precision::fp8) ? "on" : "off";
  j["guard_every"] = c.guard.every;
  j["guard_tolerance"] = c.guard.tolerance;
  j["guard_patience"] = c.guard.patience;
  j["guard_action"] = guard_action_name(c.guard.action);
  j["max_skipped_steps"] = c.max_skipped_steps;
  return j;
}

Json machine_json(const std::string& device) {
  Json j = Json::object();
  // x86 names the model per processor; arm64 kernels often only give the implementer.
  std::string cpu = first_field("/proc/cpuinfo", {"model name", "Model", "Hardware"});
  j["cpu"] = cpu.empty() ? "unknown" : cpu;
  j["cores"] = static_cast<int64_t>(std::thread::hardware_concurrency());
  j["device"] = device;
  // The NVIDIA driver's view, one directory per GPU (by PCI bus, not CUDA ordinal).
  Json gpus = Json::array();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    const std::string model = first_field((entry.path() / "information").string(), {"Model"});
    if (!model.empty()) gpus.push_back(model);
  }
  j["gpus"] = std::move(gpus);
  return j;
}

std::string build_commit() {
  return OCTET_COMMIT;
}

Json run_info_json(const TrainConfig& config, const model::Llama& model) {
  Json j = Json::object();
  j["config"] = train_config_json(config);
  j["commit"] = build_commit();
  j["octet_version"] = OCTET_VERSION;
  j["parameters"] = model.parameter_count();
  j["tokens_per_step"] = model.tokens() * config.grad_accum;
  j["machine"] = machine_json(config.device);
  return j;
}

void write_run_info(const TrainConfig& config, const model::Llama& model) {
  if (config.out_dir.empty()) return;
  const std::string path = config.out_dir + "/run.json";
  if (config.resume && fs::exists(path)) return;
  std::error_code ec;
  fs::create_directories(config.out_dir, ec);
  OCTET_CHECK(!ec, "train", config.out_dir, ": cannot create the run directory: ", ec.message());
  write_json_file(path, run_info_json(config, model));
}

}  // namespace octet::train
