// train/checkpoint.cpp
#include "train/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "train/retention.h"
#include "train/run_links.h"

namespace octet::train {
namespace fs = std::filesystem;
namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::vector<NamedTensor> model_tensors(const model::Llama& model) {
  std::vector<NamedTensor> out;
  for (const model::ParamInfo& p : model.params()) out.push_back({p.name, model.master_view(p)});
  return out;
}

void fsync_directory(const std::string& dir) {
  if (FILE* f = std::fopen(dir.c_str(), "r")) {
    ::fsync(fileno(f));
    std::fclose(f);
  }
}

}  // namespace

std::string checkpoint_dir(const std::string& dir, int64_t step) {
  return dir + "/" + step_name(step);
}

std::string checkpoint_temp_dir(const std::string& dir, int64_t step, int64_t pid) {
  return checkpoint_dir(dir, step) + ".tmp-" + std::to_string(pid);
}

std::string save_checkpoint(const std::string& dir, const model::Llama& model, const Tensor& m,
                            const Tensor& v, const TrainerState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  OCTET_CHECK(!ec, "checkpoint", dir, ": cannot create the directory: ", ec.message());
  const std::string name = step_name(state.step);
  const std::string final_dir = checkpoint_dir(dir, state.step);
  const std::string temp_dir = checkpoint_temp_dir(dir, state.step, ::getpid());
  // The ranks of a data-parallel run may have written their optimizer shards there already.
  if (state.shard_staging != temp_dir) fs::remove_all(temp_dir, ec);
  fs::create_directories(temp_dir, ec);
  OCTET_CHECK(!ec, "checkpoint", temp_dir, ": cannot create the directory: ", ec.message());
  try {
    save_safetensors(temp_dir + "/model.safetensors", model_tensors(model), {{"format", "pt"}});
    write_json_file(temp_dir + "/config.json", model::llama_config_to_json(model.config()));
    std::vector<NamedTensor> trainer;
    if (!state.optimizer_shards) trainer = {{"adamw.m", m}, {"adamw.v", v}};
    for (auto& [name, tensor] : model.scaling_state_tensors()) trainer.push_back({name, tensor});
    save_safetensors(temp_dir + "/trainer_state.safetensors", trainer);
    Json js = Json::object();
    js["step"] = state.step;
    js["data_epoch"] = static_cast<int64_t>(state.data_position.epoch);
    js["data_index"] = static_cast<int64_t>(state.data_position.index);
    js["precision"] = state.precision;
    js["recipe"] = state.recipe;
    js["parameters"] = model.parameter_count();
    js["schedule_steps"] = state.schedule_steps;
    if (!state.requested_precision.empty()) js["requested_precision"] = state.requested_precision;
    js["wall_s"] = state.wall_s;
    js["skipped_steps"] = state.skipped_steps;
    js["guard_passed"] = state.guard_passed;
    if (state.optimizer_shards) {
      const ShardLayout& layout = *state.optimizer_shards;
      js["optimizer_shards"] = shard_layout_to_json(layout);
      for (int r = 0; r < layout.ranks(); ++r) {
        const std::string file = optimizer_shard_file(r, layout.ranks());
        if (state.shard_staging != temp_dir)
          fs::rename(state.shard_staging + "/" + file, temp_dir + "/" + file, ec);
        OCTET_CHECK(!ec && fs::exists(temp_dir + "/" + file), "checkpoint", "rank ", r,
                    "'s optimizer shard ", file, " is not in ", temp_dir,
                    ec ? ": " + ec.message() : std::string());
      }
      if (state.shard_staging != temp_dir) fs::remove_all(state.shard_staging, ec);
    }
    write_json_file(temp_dir + "/trainer_state.json", js);
    if (!state.tokenizer.empty()) {
      fs::copy_file(state.tokenizer, temp_dir + "/tokenizer.model", ec);
      OCTET_CHECK(!ec, "checkpoint", "cannot copy the tokenizer ", state.tokenizer, ": ",
                  ec.message());
    }
    fsync_directory(temp_dir);
    // A checkpoint of the same step written before (a re-run) is replaced whole.
    fs::remove_all(final_dir, ec);
    fs::rename(temp_dir, final_dir, ec);
    OCTET_CHECK(!ec, "checkpoint", "cannot rename ", temp_dir, " to ", final_dir, ": ",
                ec.message());
    fsync_directory(dir);
    write_file_atomic(dir + "/latest", name + "\n");
    link_latest_files(dir, name);  // from_pretrained(dir) loads the newest
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }
  return final_dir;
}

std::string latest_checkpoint(const std::string& dir) {
  const std::string path = dir + "/latest";
  std::error_code ec;  // the error_code forms: a bad name is an octet::Error, never a throw
  OCTET_CHECK(fs::exists(path, ec), "checkpoint", path,
              ": no checkpoint to resume from (the file naming the latest one is missing)");
  std::string name = read_text_file(path);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  OCTET_CHECK(checkpoint_step_of(name).has_value(), "checkpoint", path,
              ": expected a step directory name (step_NNNNNNNN), got '",
              name.size() > 64 ? name.substr(0, 64) + "..." : name, "'");
  const std::string step_dir = dir + "/" + name;
  OCTET_CHECK(fs::is_directory(step_dir, ec), "checkpoint", path, " names ", step_dir,
              ", which does not exist");
  return step_dir;
}

std::string checkpoint_step_dir(const std::string& dir, const char* op, const char* purpose) {
  if (fs::exists(dir + "/latest")) return latest_checkpoint(dir);
  OCTET_CHECK(fs::exists(dir + "/model.safetensors"), op, "--checkpoint ", dir,
              " holds no checkpoint to ", purpose,
              " (neither model.safetensors nor a 'latest' file); give a run's --out directory or "
              "one of its step_* directories");
  return dir;
}

void check_checkpoint_model(const std::string& step_dir, const model::Llama& model) {
  const std::string config_path = step_dir + "/config.json";
  const model::LlamaConfig stored =
      model::llama_config_from_json(read_json_file(config_path), config_path);
  const model::LlamaConfig& c = model.config();
  OCTET_CHECK(stored.vocab_size == c.vocab_size && stored.hidden_size == c.hidden_size &&
                  stored.intermediate_size == c.intermediate_size &&
                  stored.num_hidden_layers == c.num_hidden_layers &&
                  stored.num_attention_heads == c.num_attention_heads &&
                  stored.num_key_value_heads == c.num_key_value_heads &&
                  stored.tie_word_embeddings == c.tie_word_embeddings,
              "checkpoint", config_path, ": the checkpoint's model shape differs from this run's");
}

void load_model_weights(const std::string& step_dir, model::Llama& model) {
  check_checkpoint_model(step_dir, model);
  const SafetensorsFile file = SafetensorsFile::open(step_dir + "/model.safetensors");
  for (const model::ParamInfo& p : model.params()) {
    OCTET_CHECK(file.contains(p.name), "checkpoint", file.path(), ": tensor '", p.name,
                "' is missing");
    file.read(p.name, model.master_view(p));
  }
  model.sync_working_weights();
}

TrainerState read_trainer_state(const std::string& step_dir) {
  const std::string json_path = step_dir + "/trainer_state.json";
  return trainer_state_from_json(read_json_file(json_path), json_path, -1);
}

TrainerState load_checkpoint(const std::string& step_dir, model::Llama& model, const Tensor& m,
                             const Tensor& v) {
  load_model_weights(step_dir, model);
  const SafetensorsFile file = SafetensorsFile::open(step_dir + "/trainer_state.safetensors");
  const std::string json_path = step_dir + "/trainer_state.json";
  TrainerState s =
      trainer_state_from_json(read_json_file(json_path), json_path, model.parameter_count());
  if (s.optimizer_shards) {
    read_optimizer_range(step_dir, *s.optimizer_shards, 0, model.parameter_count(), Tensor(), m, v);
  } else {
    file.read("adamw.m", m);
    file.read("adamw.v", v);
  }
  for (const auto& [name, tensor] : model.scaling_state_tensors()) file.read(name, tensor);
  model.scaling_state_loaded();
  return s;
}

TrainerState trainer_state_from_json(const Json& js, const std::string& json_path,
                                     int64_t parameter_count) {
  check_known_keys(js,
                   {"step", "data_epoch", "data_index", "precision", "recipe", "parameters",
                    "requested_precision", "wall_s", "skipped_steps", "guard_passed",
                    "schedule_steps", "optimizer_shards"},
                   json_path);
  TrainerState s;
  s.step = get_int(js, "step", json_path);
  s.data_position.epoch = static_cast<uint64_t>(get_int(js, "data_epoch", json_path));
  s.data_position.index = static_cast<uint64_t>(get_int(js, "data_index", json_path));
  s.precision = get_string(js, "precision", json_path);
  s.recipe = get_string(js, "recipe", json_path);
  OCTET_CHECK(s.step >= 0 && get_int(js, "data_epoch", json_path) >= 0 &&
                  get_int(js, "data_index", json_path) >= 0,
              "checkpoint", json_path, ": step, data_epoch and data_index must be >= 0");
  OCTET_CHECK(parameter_count < 0 || get_int(js, "parameters", json_path) == parameter_count,
              "checkpoint", json_path, ": parameters disagrees with the model");
  // Written since the convergence guard and the kept schedule; absent from older checkpoints.
  s.requested_precision = get_string_or(js, "requested_precision", "", json_path);
  s.wall_s = get_number_or(js, "wall_s", 0.0, json_path);
  s.skipped_steps = get_int_or(js, "skipped_steps", 0, json_path);
  s.guard_passed = get_bool_or(js, "guard_passed", false, json_path);
  s.schedule_steps = get_int_or(js, "schedule_steps", 0, json_path);
  if (js.contains("optimizer_shards")) {
    s.optimizer_shards = shard_layout_from_json(js["optimizer_shards"], json_path);
    OCTET_CHECK(parameter_count < 0 || s.optimizer_shards->parameters == parameter_count,
                "checkpoint", json_path, ": optimizer_shards.parameters disagrees with the model");
  }
  return s;
}

}  // namespace octet::train
