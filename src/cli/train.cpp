// cli/train.cpp: `octet train` (a training run from flags) and `octet sample`
// (tokens from a checkpoint).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "io/json.h"
#include "model/llama.h"
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
  c.recipe = fp8::Recipe::parse(args.get("fp8-recipe", c.recipe.str()));
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
              c.precision == nn::Precision::fp8 ? (" (" + c.recipe.str() + ")").c_str() : "",
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

  // The prompt: comma-separated token ids.
  std::vector<int32_t> tokens;
  const std::vector<long long> prompt = args.get_int_list("prompt", {0});
  for (long long id : prompt) {
    OCTET_CHECK(id >= 0 && id < config.vocab_size, "sample", "prompt token ", id,
                " is outside the vocabulary [0, ", config.vocab_size, ")");
    tokens.push_back(static_cast<int32_t>(id));
  }
  const int64_t s = m.options().seq_len, n = args.get_int("tokens", 32);
  const double temperature = args.get_double("temperature", 1.0);
  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int("seed", 0)));
  std::vector<int32_t> window(static_cast<size_t>(s)), none(static_cast<size_t>(s), 0);
  for (int64_t i = 0; i < n; ++i) {
    // The last s tokens, left-aligned; positions after them cannot affect earlier logits.
    const size_t start = tokens.size() > static_cast<size_t>(s) ? tokens.size() - s : 0;
    const size_t len = tokens.size() - start;
    std::fill(window.begin(), window.end(), 0);
    std::copy(tokens.begin() + start, tokens.end(), window.begin());
    m.forward(Tensor(window.data(), DType::i32, {1, s}), Tensor(none.data(), DType::i32, {1, s}),
              0.0f);
    const float* logits = m.logits().as<const float>() + (len - 1) * config.vocab_size;
    int32_t next = 0;
    if (temperature <= 0.0) {
      for (int64_t v = 1; v < config.vocab_size; ++v) next = logits[v] > logits[next] ? v : next;
    } else {
      double max = logits[0], total = 0.0;
      for (int64_t v = 1; v < config.vocab_size; ++v) max = std::max<double>(max, logits[v]);
      std::vector<double> p(static_cast<size_t>(config.vocab_size));
      for (int64_t v = 0; v < config.vocab_size; ++v)
        total += p[v] = std::exp((logits[v] - max) / temperature);
      double u = static_cast<double>(rng() >> 11) * 0x1p-53 * total;
      for (next = 0; next + 1 < config.vocab_size && u >= p[next]; ++next) u -= p[next];
    }
    tokens.push_back(next);
  }
  for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%d", i ? "," : "", tokens[i]);
  std::printf("\n");
  return 0;
}

}  // namespace octet::cli
