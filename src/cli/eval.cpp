// cli/eval.cpp: `octet eval`: the loss and perplexity of a checkpoint on the validation
// shards, in each precision asked for; the same forward pass and batches as the trainer's
// evaluation, so it reports what `octet train` reported for that step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/run_checks.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "data/loader.h"
#include "fp8/recipe.h"
#include "io/json.h"
#include "io/json_fields.h"
#include "model/llama.h"
#include "nn/precision.h"
#include "train/checkpoint.h"

namespace octet::cli {
namespace {

struct EvalFlags {
  std::string checkpoint, data, device = "cpu";
  std::vector<std::string> precisions;  // empty: the checkpoint's
  std::string recipe;                   // empty: the checkpoint's (or the default)
  int64_t batch = 8, seq_len = 0, batches = 0;
};

// The mean cross-entropy over `batches` batches of `val` (from its start), as
// Trainer::evaluate computes it.
double mean_loss(model::Llama& m, data::TokenLoader& val, int64_t batches) {
  const int64_t b = m.options().batch, s = m.options().seq_len, t = m.tokens();
  const Device device = m.options().device;
  Buffer batch(device, static_cast<size_t>(2 * t) * 4), loss(device, 4);
  const Tensor inputs = batch.view(DType::i32, {b, s}, 0);
  const Tensor targets = batch.view(DType::i32, {b, s}, static_cast<size_t>(t) * 4);
  Buffer host(Device::cpu(), device.is_cpu() ? 0 : batch.bytes());
  const Tensor host_inputs = device.is_cpu() ? inputs : host.view(DType::i32, {b, s}, 0);
  const Tensor host_targets =
      device.is_cpu() ? targets : host.view(DType::i32, {b, s}, static_cast<size_t>(t) * 4);
  zero_bytes(loss.view(DType::f32, {1}).data, device, 4);
  val.seek({0, 0});
  const double weight = 1.0 / static_cast<double>(t * batches);
  for (int64_t i = 0; i < batches; ++i) {
    val.next(host_inputs, host_targets);
    if (!device.is_cpu()) {
      copy_tensor(host_inputs, inputs);
      copy_tensor(host_targets, targets);
    }
    m.forward(inputs, targets, 0.0f, loss.view(DType::f32, {1}), weight);
  }
  float mean = 0.0f;
  copy_bytes(&mean, Device::cpu(), loss.view(DType::f32, {1}).data, device, 4);
  return mean;
}

int evaluate(const EvalFlags& f) {
  check_device_present("eval", f.device);
  const std::string dir = train::checkpoint_step_dir(f.checkpoint, "eval", "evaluate");
  const std::string config_path = dir + "/config.json";
  const model::LlamaConfig config =
      model::llama_config_from_json(read_json_file(config_path), config_path);
  // What the run trained with: the default precision and recipe.
  std::string run_precision = "bf16", run_recipe;
  const std::string state_path = dir + "/trainer_state.json";
  if (std::filesystem::exists(state_path)) {
    const Json state = read_json_file(state_path);
    run_precision = get_string_or(state, "precision", run_precision, state_path);
    run_recipe = get_string_or(state, "recipe", "", state_path);
    std::replace(run_recipe.begin(), run_recipe.end(), '/', ':');  // older checkpoints
  }
  const std::vector<std::string> precisions =
      f.precisions.empty() ? std::vector<std::string>{run_precision} : f.precisions;
  const std::string recipe_text = !f.recipe.empty() ? f.recipe : run_recipe;
  const fp8::Recipe recipe = recipe_text.empty() ? fp8::Recipe() : fp8::Recipe::parse(recipe_text);

  data::LoaderConfig lc;
  lc.batch = f.batch;
  lc.seq_len = f.seq_len > 0 ? f.seq_len : config.max_position_embeddings;
  lc.shuffle = false;
  data::TokenLoader val(data::find_shards(f.data, "val"), lc);
  OCTET_CHECK(val.vocab_size() <= static_cast<uint32_t>(config.vocab_size), "eval", "--data ",
              f.data, ": the shards' vocabulary (", val.vocab_size(),
              ") exceeds the model's vocab_size (", config.vocab_size, ")");
  const auto full = static_cast<int64_t>(val.sequences_per_epoch()) / f.batch;
  OCTET_CHECK(full >= 1 || f.batches > 0, "eval", "--data ", f.data,
              ": the validation split holds ", val.sequences_per_epoch(), " sequences of ",
              lc.seq_len, " tokens, fewer than one --batch of ", f.batch,
              "; lower --batch or --seq-len");
  const int64_t batches = f.batches > 0 ? f.batches : full;

  std::printf("octet eval: %s on %s/val_*.bin, %lld batch(es) of %lld x %lld tokens\n", dir.c_str(),
              f.data.c_str(), static_cast<long long>(batches), static_cast<long long>(f.batch),
              static_cast<long long>(lc.seq_len));
  std::printf("%-10s %10s %12s\n", "precision", "loss", "perplexity");
  for (const std::string& name : precisions) {
    model::ModelOptions options;
    options.precision = nn::precision_from_name(name);
    options.recipe = recipe;
    options.batch = f.batch;
    options.seq_len = lc.seq_len;
    options.device = device_from_name(f.device);
    model::Llama m(config, options);
    train::load_model_weights(dir, m);
    const double loss = mean_loss(m, val, batches);
    std::printf("%-10s %10.6f %12.4f\n", name.c_str(), loss, std::exp(loss));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_eval_command(Commands& commands, CLI::App& octet) {
  auto f = std::make_shared<EvalFlags>();
  CLI::App* e = commands.add(
      octet, "eval",
      "loss and perplexity of a checkpoint on the validation shards, in each --precision",
      [f] { return evaluate(*f); });
  e->add_option("--checkpoint", f->checkpoint,
                "a run's --out directory (its latest checkpoint) or one of its step_* "
                "directories")
      ->required()
      ->check(CLI::ExistingDirectory);
  e->add_option("--data", f->data, "a directory of token shards (its val_*.bin)")
      ->required()
      ->check(CLI::ExistingDirectory);
  e->add_option("--precision", f->precisions,
                "comma-separated: fp32, bf16, fp8 (default: the precision the run trained in)")
      ->delimiter(',')
      ->check(parses_with(nn::precision_from_name, "PRECISION"));
  e->add_option("--fp8-recipe", f->recipe,
                "the recipe under fp8 (default: the run's, else tensor-current)")
      ->check(parses_with(fp8::Recipe::parse, "RECIPE"));
  e->add_option("--batch", f->batch, "sequences per batch (as octet train's --batch)")
      ->check(at_least(1));
  e->add_option("--seq-len", f->seq_len, "tokens per sequence")
      ->check(at_least(1))
      ->default_str("the model's max_position_embeddings");
  e->add_option("--batches", f->batches,
                "batches from the start of the split (as octet train's --eval-batches; 0: "
                "every full batch)")
      ->check(at_least(0));
  e->add_option("--device", f->device, "cpu, cuda or cuda:N")
      ->check(parses_with(device_from_name, "DEVICE"));
}

}  // namespace octet::cli
