// cli/train.cpp: `octet train` (a training run from flags) and `octet sample`
// (tokens from a checkpoint).
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "io/json.h"
#include "model/llama.h"
#include "model/sample.h"
#include "nn/precision.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace octet::cli {
namespace {

void on_sigint(int) {
  train::request_stop();
}

}  // namespace

int train_main(const std::vector<std::string>& argv) {
  const Args args("train", argv,
                  {"model",        "precision",    "fp8-recipe",       "device",       "data",
                   "markov-vocab", "markov-order", "markov-seed",      "train-tokens", "val-tokens",
                   "batch",        "seq-len",      "grad-accum",       "steps",        "lr",
                   "min-lr-ratio", "warmup",       "weight-decay",     "grad-clip",    "seed",
                   "eval-every",   "eval-batches", "checkpoint-every", "log-every",    "out",
                   "metrics"},
                  {"resume", "quiet"});
  OCTET_CHECK(args.positional().empty(), "train", "unexpected argument '", args.positional()[0],
              "'");
  train::TrainConfig c;
  c.model = args.get("model", c.model);
  c.precision = nn::precision_from_name(args.get("precision", "bf16"));
  c.recipe = args.get("fp8-recipe", c.recipe);
  c.device = args.get("device", c.device);
  c.data.source = args.get("data", c.data.source);
  c.data.markov_vocab = static_cast<int>(args.get_int("markov-vocab", c.data.markov_vocab));
  c.data.markov_order = static_cast<int>(args.get_int("markov-order", c.data.markov_order));
  c.data.markov_seed = static_cast<uint64_t>(args.get_int("markov-seed", 0));
  c.data.train_tokens = args.get_int("train-tokens", c.data.train_tokens);
  c.data.val_tokens = args.get_int("val-tokens", c.data.val_tokens);
  c.batch = args.get_int("batch", c.batch);
  c.seq_len = args.get_int("seq-len", c.seq_len);
  c.grad_accum = args.get_int("grad-accum", c.grad_accum);
  c.steps = args.get_int("steps", c.steps);
  c.lr = args.get_double("lr", c.lr);
  c.min_lr_ratio = args.get_double("min-lr-ratio", c.min_lr_ratio);
  c.warmup = args.get_int("warmup", c.warmup);
  c.weight_decay = args.get_double("weight-decay", c.weight_decay);
  c.grad_clip = args.get_double("grad-clip", c.grad_clip);
  c.seed = static_cast<uint64_t>(args.get_int("seed", static_cast<long long>(c.seed)));
  c.eval_every = args.get_int("eval-every", c.eval_every);
  c.eval_batches = args.get_int("eval-batches", c.eval_batches);
  c.checkpoint_every = args.get_int("checkpoint-every", c.checkpoint_every);
  // On a GPU every progress line waits for the device: by default one every 10 steps.
  c.log_every = args.get_int("log-every", c.device == "cpu" ? c.log_every : 10);
  c.out_dir = args.get("out", "");
  c.metrics = args.get("metrics", "");
  c.resume = args.has("resume");
  c.quiet = args.has("quiet");

  train::Trainer trainer(c);
  const model::Llama& m = trainer.model();
  std::printf("octet train: %s, %lld parameters, --precision %s%s, batch %lld x %lld tokens",
              c.model.c_str(), static_cast<long long>(m.parameter_count()),
              nn::precision_name(c.precision),
              c.precision == nn::Precision::fp8 ? (" (" + c.recipe + ")").c_str() : "",
              static_cast<long long>(c.batch), static_cast<long long>(m.options().seq_len));
  if (trainer.loss_floor()) std::printf(", loss floor %.4f nats", *trainer.loss_floor());
  std::printf("\n");
  std::fflush(stdout);

  train::clear_stop_request();
  std::signal(SIGINT, on_sigint);
  const auto records = trainer.run();
  std::signal(SIGINT, SIG_DFL);
  if (train::stop_requested()) {
    std::printf("stopped at step %lld%s\n", static_cast<long long>(trainer.step()),
                c.out_dir.empty() ? "" : "; checkpoint written");
    return 130;
  }
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->val_loss) {
      std::printf("final val_loss %.4f", *it->val_loss);
      if (trainer.loss_floor()) {
        std::printf(" (floor %.4f, +%.2f%%)", *trainer.loss_floor(),
                    100.0 * (*it->val_loss / *trainer.loss_floor() - 1.0));
      }
      std::printf("\n");
      break;
    }
  }
  return 0;
}

int sample_main(const std::vector<std::string>& argv) {
  const Args args("sample", argv, {"checkpoint", "prompt", "tokens", "temperature", "seed"});
  OCTET_CHECK(args.has("checkpoint"), "sample",
              "--checkpoint DIR is required (a run's --out directory or one of its step_* dirs)");
  std::string dir = args.get("checkpoint", "");
  if (!std::filesystem::exists(dir + "/model.safetensors")) dir = train::latest_checkpoint(dir);
  const std::string config_path = dir + "/config.json";
  const model::LlamaConfig config =
      model::llama_config_from_json(read_json_file(config_path), config_path);
  model::ModelOptions options;
  options.precision = nn::Precision::fp32;
  options.batch = 1;
  model::Llama m(config, options);
  train::load_model_weights(dir, m);

  std::vector<int32_t> prompt;
  for (long long id : args.get_int_list("prompt", {0})) {
    OCTET_CHECK(id >= INT32_MIN && id <= INT32_MAX, "sample", "prompt token ", id,
                " is outside the vocabulary [0, ", config.vocab_size, ")");
    prompt.push_back(static_cast<int32_t>(id));
  }
  const std::vector<int32_t> tokens =
      model::sample(m, prompt,
                    {.tokens = args.get_int("tokens", 32),
                     .temperature = args.get_double("temperature", 1.0),
                     .seed = static_cast<uint64_t>(args.get_int("seed", 0))});
  for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%d", i ? "," : "", tokens[i]);
  std::printf("\n");
  return 0;
}

}  // namespace octet::cli
