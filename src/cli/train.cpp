// cli/train.cpp: `octet train` (a training run from flags) and `octet sample`
// (tokens from a checkpoint): their flags, each declared once, and what they run.
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/run_checks.h"
#include "cli/sample_text.h"
#include "core/device.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/fp8_comm.h"
#include "fp8/recipe.h"
#include "io/json.h"
#include "model/llama.h"
#include "model/sample.h"
#include "nn/precision.h"
#include "train/checkpoint.h"
#include "train/guard.h"
#include "train/trainer.h"

namespace octet::cli {
namespace {

// SIGINT (Ctrl-C) or SIGTERM: stop after this step, write a checkpoint, exit 0. A second one
// (while that checkpoint is written, say) exits at once with 128 + signal: the checkpoint
// being written is a temporary folder the next start removes, and the previous one and
// `latest` are untouched.
void on_stop_signal(int sig) {
  if (train::stop_requested()) {
    static const char msg[] = "\noctet: second signal: exiting now, without a checkpoint\n";
    const ssize_t ignored = ::write(2, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(128 + sig);
  }
  train::request_stop();
}

void set_stop_handlers(void (*handler)(int)) {
  struct sigaction sa = {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int train_on(const train::TrainConfig& c, const std::shared_ptr<dist::Comm>& comm);

// Runs the training `c` describes: progress on stdout; 0 also when stopped by SIGINT or
// SIGTERM (after writing a checkpoint where --out is set). Under mpirun, data parallel over
// the launched ranks; an error on any rank is printed with its rank and ends every rank.
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
    train::clear_stop_request();
    set_stop_handlers(on_stop_signal);  // a stop asked of any rank: Trainer::agreed_stop
    trainer.run();
    set_stop_handlers(SIG_DFL);
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
  // Under mpirun the ranks agree on the step to stop at (Trainer::agreed_stop).
  set_stop_handlers(on_stop_signal);
  const auto records = trainer.run();
  set_stop_handlers(SIG_DFL);
  if (train::stop_requested()) {
    std::printf("stopped at step %lld%s\n", static_cast<long long>(trainer.step()),
                c.out_dir.empty() ? "" : "; checkpoint written");
    return 0;
  }
  if (trainer.precision() != c.precision) {
    std::printf(
        "the guard switched the run to %s (asked: %s); see the metrics' \"guard\" records\n",
        nn::precision_name(trainer.precision()), nn::precision_name(c.precision));
  }
  if (trainer.skipped_steps() > 0) {
    std::printf("%lld steps were skipped for a non-finite loss or gradient norm\n",
                static_cast<long long>(trainer.skipped_steps()));
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
  std::string prompt;     // text with a tokenizer, else comma-separated ids
  std::string tokenizer;  // overrides the one the checkpoint carries
  bool ids = false;       // token ids in and out, even with a tokenizer
  model::SampleOptions options;
};

int sample(const SampleFlags& f) {
  if (f.ids) parse_prompt_ids(f.prompt);  // a bad id list is named before anything is read
  const std::string dir = train::checkpoint_step_dir(f.checkpoint, "sample", "sample from");
  const std::string config_path = dir + "/config.json";
  const model::LlamaConfig config =
      model::llama_config_from_json(read_json_file(config_path), config_path);
  model::ModelOptions options;
  options.precision = nn::Precision::fp32;
  options.batch = 1;
  model::Llama m(config, options);
  train::load_model_weights(dir, m);

  const SamplePrompt prompt = sample_prompt(dir, f.prompt, f.tokenizer, f.ids);
  const std::vector<int32_t> tokens = model::sample(m, prompt.ids, f.options);
  std::printf("%s\n", sample_output(prompt, tokens).c_str());
  return 0;
}

}  // namespace

void add_train_commands(Commands& commands, CLI::App& octet) {
  auto c = std::make_shared<train::TrainConfig>();
  auto overwrite = std::make_shared<bool>(false);
  CLI::App* t = commands.add(octet, "train", "train a LLaMA model", [c, overwrite] {
    check_device_present("train", c->device);
    check_out_dir(*c, *overwrite);
    return train(*c);
  });
  t->add_option("--device", c->device, "cpu, cuda or cuda:N")
      ->check(parses_with(device_from_name, "DEVICE"));
  t->add_option("--model", c->model, "tiny, small, 1b, 7b or a config.json path");
  add_parsed(*t, "--precision", c->precision, nn::precision_from_name, "fp32, bf16 or fp8")
      ->default_str("bf16");
  add_parsed(*t, "--fp8-recipe", c->recipe, fp8::Recipe::parse,
             "FP8 recipe under --precision fp8: MODE[:OPTION...]; modes " +
                 fp8::scaling_mode_list(", ") +
                 "; options :hybrid (E5M2 grads) or :e4m3 (all E4M3: row/block/mx default), :pow2, "
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
                "reduce-scattered, weights all-gathered) or 2 (and the gradients reduce-scattered "
                "in buckets of --bucket-mb during the backward); default 1")
      ->check(CLI::Range(0, 2));
  t->add_option("--bucket-mb", c->bucket_mb,
                "--zero 2: the gradient buckets' size in MiB (consecutive layers grouped up to "
                "it; a larger layer is a bucket alone)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_parsed(*t, "--fp8-comm", c->fp8_comm, dist::fp8_comm_from_name,
             "under mpirun and --precision fp8: none, grads (the block linears' gradients "
             "reduce-scattered in FP8), weights (their weights all-gathered in FP8; --zero 1 "
             "or 2) or weights+grads")
      ->default_str("none");
  t->add_option("--seq-len", c->seq_len, "tokens per sequence")
      ->check(at_least(1))
      ->default_str("the model's max_position_embeddings");
  t->add_option("--grad-accum", c->grad_accum, "micro-batches per optimizer step")
      ->check(at_least(1));
  t->add_option("--steps", c->steps, "optimizer steps")->check(at_least(1));
  t->add_option("--lr", c->lr, "peak learning rate")->check(above(0));
  t->add_option("--min-lr-ratio", c->min_lr_ratio, "the cosine ends at lr x this")
      ->check(CLI::Range(0.0, 1.0));
  t->add_option("--warmup", c->warmup, "linear warm-up steps")->check(at_least(0));
  t->add_option("--weight-decay", c->weight_decay, "AdamW weight decay")->check(at_least(0));
  t->add_option("--adam-beta1", c->beta1, "AdamW's first-moment decay")
      ->check(at_least_and_below(0, 1));
  t->add_option("--adam-beta2", c->beta2, "AdamW's second-moment decay")
      ->check(at_least_and_below(0, 1));
  t->add_option("--adam-eps", c->eps, "AdamW's epsilon, added to the root of the second moment")
      ->check(above(0));
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
  t->add_option("--keep-last", c->retention.keep_last,
                "checkpoints kept: the newest N (0: every one); `latest` is always kept")
      ->check(at_least(0));
  t->add_option("--keep-every", c->retention.keep_every,
                "also keep every checkpoint whose step is a multiple of M (0: none)")
      ->check(at_least(0));
  t->add_option("--metrics", c->metrics,
                "JSON-lines file of per-step metrics (default with --out: OUT/metrics.jsonl)");
  t->add_flag("--resume", c->resume, "continue from the latest checkpoint in --out");
  t->add_flag("--extend-schedule", c->extend_schedule,
              "--resume with a larger --steps: re-plan the lr cosine over --steps (by default the "
              "run keeps its schedule and continues at its final lr)");
  t->add_flag("--overwrite", *overwrite,
              "delete the checkpoints already in --out and start a new run there");
  t->add_flag("--quiet", c->quiet, "no progress lines");
  add_parsed(
      *t, "--guard", c->guard.enabled,
      [](const std::string& v) -> std::optional<bool> {
        OCTET_CHECK(v == "on" || v == "off", "train", "--guard takes on or off, not '", v, "'");
        return v == "on";
      },
      "FP8 convergence guard: compare the fp8 validation loss with bf16's on the same weights "
      "and act when fp8 falls behind (on|off; default on under fp8)");
  t->add_option("--guard-every", c->guard.every, "steps between guard checks (0: at each eval)")
      ->check(at_least(0));
  t->add_option("--guard-tolerance", c->guard.tolerance,
                "relative excess of the fp8 loss over bf16's that fails a check")
      ->check(at_least(0));
  t->add_option("--guard-patience", c->guard.patience,
                "consecutive failed checks before the guard acts")
      ->check(at_least(1));
  add_parsed(*t, "--guard-action", c->guard.action, train::guard_action_from_name,
             "warn, fallback (bf16 from the current weights) or rollback (bf16 from the last "
             "checkpoint whose check passed)")
      ->default_str("rollback");
  t->add_option("--max-skipped-steps", c->max_skipped_steps,
                "consecutive steps with a non-finite loss or gradient norm (each skipped) "
                "before the run stops")
      ->check(at_least(1));
  const CLI::Option* recipe = t->get_option("--fp8-recipe");
  t->parse_complete_callback([c, log_every, recipe] {
    if (recipe->count() > 0 && c->precision != nn::Precision::fp8) {
      throw CLI::ValidationError(
          "--fp8-recipe",
          std::string("applies under --precision fp8, and this run is --precision ") +
              nn::precision_name(c->precision) + "; add --precision fp8 or drop --fp8-recipe");
    }
    if (log_every->count() == 0 && c->device != "cpu") c->log_every = 10;
    // A run directory holds its metrics, for `octet report DIR`.
    if (c->metrics.empty() && !c->out_dir.empty()) c->metrics = c->out_dir + "/metrics.jsonl";
  });

  auto s = std::make_shared<SampleFlags>();
  CLI::App* sa = commands.add(octet, "sample", "generate text (or token ids) from a checkpoint",
                              [s] { return sample(*s); });
  sa->add_option("--checkpoint", s->checkpoint,
                 "a run's --out directory or one of its step_* directories")
      ->required()
      ->check(CLI::ExistingDirectory);
  sa->add_option("--prompt", s->prompt,
                 "text, with a tokenizer (--tokenizer or the checkpoint's tokenizer.model); "
                 "else, or with --ids, comma-separated token ids");
  sa->add_option("--tokenizer", s->tokenizer,
                 "a SentencePiece tokenizer.model (default: the one the checkpoint carries)")
      ->check(CLI::ExistingFile);
  sa->add_flag("--ids", s->ids, "token ids in (--prompt 1,2,3) and out, even with a tokenizer");
  sa->add_option("--tokens", s->options.tokens, "tokens to generate")->check(at_least(0));
  sa->add_option("--temperature", s->options.temperature, "softmax temperature (0: greedy)")
      ->check(at_least(0));
  sa->add_option("--seed", s->options.seed, "seed of the sampling");
}

}  // namespace octet::cli
