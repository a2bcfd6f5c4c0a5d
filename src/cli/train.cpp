// cli/train.cpp: `octet train` (a training run from flags) and `octet sample`
// (tokens from a checkpoint): their flags, each declared once, and what they run.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/device.h"
#include "core/error.h"
#include "dist/comm.h"
#include "fp8/recipe.h"
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

int train_on(const train::TrainConfig& c, const std::shared_ptr<dist::Comm>& comm);

// Runs the training `c` describes: progress on stdout, 130 when stopped by Ctrl-C. Under
// mpirun, data parallel over the launched ranks; an error on any rank is printed with its
// rank and ends every rank.
int train(const train::TrainConfig& c) {
  const std::shared_ptr<dist::Comm> comm = dist::launch(device_from_name(c.device));
  if (comm->size() == 1) return train_on(c, comm);
  try {
    return train_on(c, comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet train: rank %d of %d: %s\n", comm->rank(), comm->size(), e.what());
    comm->abort(1);
  }
  return 1;  // abort() does not return
}

int train_on(const train::TrainConfig& c, const std::shared_ptr<dist::Comm>& comm) {
  train::Trainer trainer(c, comm);
  const model::Llama& m = trainer.model();
  if (comm->rank() == 0 && comm->size() > 1) {
    std::printf("octet train: data parallel over %d ranks (%s), --zero %d, global batch %lld\n",
                comm->size(), comm->backend().c_str(), c.zero < 0 ? 1 : c.zero,
                static_cast<long long>(c.batch * comm->size()));
  }
  if (comm->rank() != 0) {
    trainer.run();
    return 0;
  }
  std::printf("octet train: %s, %lld parameters, --precision %s%s, batch %lld x %lld tokens",
              c.model.c_str(), static_cast<long long>(m.parameter_count()),
              nn::precision_name(c.precision),
              c.precision == nn::Precision::fp8 ? (" (" + c.recipe.str() + ")").c_str() : "",
              static_cast<long long>(c.batch), static_cast<long long>(m.options().seq_len));
  if (trainer.loss_floor()) std::printf(", loss floor %.4f nats", *trainer.loss_floor());
  std::printf("\n");
  std::fflush(stdout);

  train::clear_stop_request();
  // Ranks would stop at different steps; under mpirun, Ctrl-C ends the run (no checkpoint).
  if (comm->size() == 1) std::signal(SIGINT, on_sigint);
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

struct SampleFlags {
  std::string checkpoint;
  std::vector<int32_t> prompt = {0};
  model::SampleOptions options;
};

int sample(const SampleFlags& f) {
  std::string dir = f.checkpoint;
  if (!std::filesystem::exists(dir + "/model.safetensors")) dir = train::latest_checkpoint(dir);
  const std::string config_path = dir + "/config.json";
  const model::LlamaConfig config =
      model::llama_config_from_json(read_json_file(config_path), config_path);
  model::ModelOptions options;
  options.precision = nn::Precision::fp32;
  options.batch = 1;
  model::Llama m(config, options);
  train::load_model_weights(dir, m);

  const std::vector<int32_t> tokens = model::sample(m, f.prompt, f.options);
  for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%d", i ? "," : "", tokens[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

void add_train_commands(Commands& commands, CLI::App& octet) {
  auto c = std::make_shared<train::TrainConfig>();
  CLI::App* t = commands.add(octet, "train", "train a LLaMA model", [c] { return train(*c); });
  t->add_option("--device", c->device, "cpu, cuda or cuda:N")
      ->check(parses_with(device_from_name, "DEVICE"));
  t->add_option("--model", c->model, "tiny, small, 1b, 7b or a config.json path");
  add_parsed(*t, "--precision", c->precision, nn::precision_from_name, "fp32, bf16 or fp8")
      ->default_str("bf16");
  add_parsed(*t, "--fp8-recipe", c->recipe, fp8::Recipe::parse,
             "FP8 recipe under --precision fp8: MODE[:OPTION...]; modes " +
                 fp8::scaling_mode_list(", ") +
                 "; options :hybrid (E5M2 gradients, the default) or :e4m3 (all E4M3), :pow2, "
                 "and for tensor-delayed :history=N, :margin=N, :amax=max|most-recent")
      ->default_str(c->recipe.str());
  t->add_option("--data", c->data.source,
                "synthetic (the built-in Markov corpus) or a directory of token shards");
  t->add_option("--markov-vocab", c->data.markov_vocab,
                "synthetic: tokens the corpus uses (0: the model's vocab_size)")
      ->check(at_least(0));
  t->add_option("--markov-order", c->data.markov_order, "synthetic: context length")
      ->check(at_least(1));
  t->add_option("--markov-seed", c->data.markov_seed, "synthetic: seed of the corpus");
  t->add_option("--train-tokens", c->data.train_tokens, "synthetic: training tokens")
      ->check(at_least(1));
  t->add_option("--val-tokens", c->data.val_tokens, "synthetic: validation tokens")
      ->check(at_least(1));
  t->add_option("--batch", c->batch, "sequences per micro-batch (per rank under mpirun)")
      ->check(at_least(1));
  t->add_option("--zero", c->zero,
                "under mpirun: 0 (gradients all-reduced) or 1 (AdamW state sharded, gradients "
                "reduce-scattered, weights all-gathered); default 1")
      ->check(CLI::Range(0, 1));
  t->add_option("--seq-len", c->seq_len, "tokens per sequence (0: max_position_embeddings)")
      ->check(at_least(0));
  t->add_option("--grad-accum", c->grad_accum, "micro-batches per optimizer step")
      ->check(at_least(1));
  t->add_option("--steps", c->steps, "optimizer steps")->check(at_least(0));
  t->add_option("--lr", c->lr, "peak learning rate")->check(at_least(0));
  t->add_option("--min-lr-ratio", c->min_lr_ratio, "the cosine ends at lr x this")
      ->check(CLI::Range(0.0, 1.0));
  t->add_option("--warmup", c->warmup, "linear warm-up steps")->check(at_least(0));
  t->add_option("--weight-decay", c->weight_decay, "AdamW weight decay")->check(at_least(0));
  t->add_option("--grad-clip", c->grad_clip, "max global gradient norm (0: no clipping)")
      ->check(at_least(0));
  t->add_option("--seed", c->seed, "weights and data order");
  t->add_option("--eval-every", c->eval_every, "steps between evaluations (0: only at the end)")
      ->check(at_least(0));
  t->add_option("--eval-batches", c->eval_batches, "validation batches per evaluation")
      ->check(at_least(1));
  t->add_option("--checkpoint-every", c->checkpoint_every,
                "steps between checkpoints (0: only at the end and on Ctrl-C)")
      ->check(at_least(0));
  // On a GPU every progress line waits for the device: by default one every 10 steps.
  CLI::Option* log_every =
      t->add_option("--log-every", c->log_every,
                    "steps between progress lines and metrics read-backs (cuda default: 10, as "
                    "a read waits for the GPU)")
          ->check(at_least(1));
  t->add_option("--out", c->out_dir, "directory of the checkpoints (none when not given)");
  t->add_option("--metrics", c->metrics, "JSON-lines file of per-step metrics");
  t->add_flag("--resume", c->resume, "continue from the latest checkpoint in --out");
  t->add_flag("--quiet", c->quiet, "no progress lines");
  t->parse_complete_callback([c, log_every] {
    if (log_every->count() == 0 && c->device != "cpu") c->log_every = 10;
  });

  auto s = std::make_shared<SampleFlags>();
  CLI::App* sa = commands.add(octet, "sample", "generate tokens from a checkpoint",
                              [s] { return sample(*s); });
  sa->add_option("--checkpoint", s->checkpoint,
                 "a run's --out directory or one of its step_* directories")
      ->required()
      ->check(CLI::ExistingDirectory);
  sa->add_option("--prompt", s->prompt, "comma-separated token ids")->delimiter(',');
  sa->add_option("--tokens", s->options.tokens, "tokens to generate")->check(at_least(0));
  sa->add_option("--temperature", s->options.temperature, "softmax temperature (0: greedy)")
      ->check(at_least(0));
  sa->add_option("--seed", s->options.seed, "seed of the sampling");
}

}  // namespace octet::cli
