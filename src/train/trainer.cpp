// train/trainer.cpp: the training loop, one optimizer step at a time.
#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/clock.h"
#include "core/error.h"
#include "data/synthetic.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "fp8/recipe.h"
#include "train/checkpoint.h"
#include "train/fp8_health.h"
#include "train/memory_check.h"
#include "train/retention.h"
#include "train/run_info.h"

namespace octet::train {
namespace {

std::atomic<bool> g_stop{false};

// On resume: the checkpoint's run planned its cosine over `planned` steps (0: not recorded,
// checkpoints before the plan was saved). A different --steps keeps that plan, unless
// --extend-schedule re-plans it; either way the change is printed.
void keep_or_extend_schedule(TrainConfig& c, int64_t planned, int64_t step) {
  if (planned <= 0 || planned == c.steps) return;
  TrainConfig kept = c, extended = c;
  kept.schedule_steps = planned;
  extended.schedule_steps = c.steps;
  const double lr_kept = lr_at(kept, step + 1), lr_extended = lr_at(extended, step + 1);
  c.schedule_steps = c.extend_schedule ? c.steps : planned;
  if (c.quiet) return;
  if (c.extend_schedule) {
    std::printf(
        "resume: --extend-schedule re-plans the cosine from %lld to %lld steps: the lr "
        "of step %lld is %.3e (the run's plan: %.3e)\n",
        static_cast<long long>(planned), static_cast<long long>(c.steps),
        static_cast<long long>(step + 1), lr_extended, lr_kept);
  } else {
    std::printf(
        "resume: keeping the run's cosine over %lld steps (--steps is %lld): the lr of "
        "step %lld is %.3e%s; --extend-schedule re-plans it over %lld steps (%.3e)\n",
        static_cast<long long>(planned), static_cast<long long>(c.steps),
        static_cast<long long>(step + 1), lr_kept, c.steps > planned ? ", the final lr" : "",
        static_cast<long long>(c.steps), lr_extended);
  }
}

}  // namespace

void request_stop() {
  g_stop.store(true);
}
bool stop_requested() {
  return g_stop.load();
}
void clear_stop_request() {
  g_stop.store(false);
}

double lr_at(const TrainConfig& c, int64_t step) {
  if (c.warmup > 0 && step <= c.warmup) return c.lr * static_cast<double>(step) / c.warmup;
  const int64_t planned = c.schedule_steps > 0 ? c.schedule_steps : c.steps;
  const double span = static_cast<double>(std::max<int64_t>(1, planned - c.warmup));
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  const double min_lr = c.lr * c.min_lr_ratio;
  return min_lr + 0.5 * (c.lr - min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

Trainer::Trainer(const TrainConfig& config) : Trainer(config, nullptr) {}

Trainer::Trainer(const TrainConfig& config, std::shared_ptr<dist::Comm> comm)
    : config_(config), comm_(comm ? std::move(comm) : dist::single_process()) {
  const int rank = comm_->rank(), world = comm_->size();
  if (rank != 0) {  // one progress line and one metrics file: rank 0's
    config_.quiet = true;
    config_.metrics.clear();
  }
  const Device device = device_from_name(config.device);
  OCTET_CHECK(config.batch > 0 && config.grad_accum > 0 && config.steps >= 0, "train",
              "batch and grad_accum must be positive and steps >= 0");
  model::LlamaConfig mc = model::load_llama_config(config.model);
  requested_precision_ = nn::precision_name(config.precision);
  // A run the guard switched to bf16 resumes under bf16.
  std::optional<TrainerState> resumed;
  if (config.resume) {
    OCTET_CHECK(!config.out_dir.empty(), "train", "--resume needs --out DIR");
    resumed = read_trainer_state(latest_checkpoint(config.out_dir));
    if (resumed->requested_precision == requested_precision_ &&
        resumed->precision != requested_precision_) {
      config_.precision = nn::precision_from_name(resumed->precision);
    }
  }
  model::ModelOptions options;
  options.precision = config_.precision;
  options.recipe = config.recipe;
  options.batch = config.batch;
  options.seq_len = config.seq_len;
  options.device = device;
  // Refuse a run that cannot fit now, with its estimate, not at some allocation later.
  check_run_fits(estimate_run_memory(mc, config.precision, config.batch, config.seq_len), device);
  model_ = std::make_unique<model::Llama>(mc, options);
  const int64_t seq = model_->options().seq_len;

  // Data: the loaders run on the host; batches are copied to the device.
  const data::LoaderConfig train_lc{.batch = config.batch,
                                    .seq_len = seq,
                                    .seed = config.seed,
                                    .shuffle = true,
                                    .rank = rank,
                                    .world = world};
  const data::LoaderConfig val_lc{.batch = config.batch,
                                  .seq_len = seq,
                                  .seed = config.seed,
                                  .shuffle = false,
                                  .rank = rank,
                                  .world = world};
  if (config.data.source == "synthetic") {
    data::MarkovConfig markov;
    markov.vocab =
        static_cast<int>(config.data.markov_vocab > 0 ? config.data.markov_vocab : mc.vocab_size);
    OCTET_CHECK(markov.vocab <= mc.vocab_size, "train", "--markov-vocab ", markov.vocab,
                " exceeds the model's vocab_size ", mc.vocab_size);
    markov.order = config.data.markov_order;
    markov.support_min = config.data.markov_support_min;
    markov.support_max = config.data.markov_support_max;
    markov.seed = config.data.markov_seed;
    const data::MarkovSource source(markov);
    loss_floor_ = source.loss_floor_nats(seq);
    data::SyntheticSplit split =
        data::synthetic_split(source, config.data.train_tokens, config.data.val_tokens);
    const auto vocab = static_cast<uint32_t>(mc.vocab_size);
    train_loader_ = std::make_unique<data::TokenLoader>(std::move(split.train), vocab, train_lc);
    val_loader_ = std::make_unique<data::TokenLoader>(std::move(split.val), vocab, val_lc);
  } else {
    train_loader_ = std::make_unique<data::TokenLoader>(
        data::find_shards(config.data.source, "train"), train_lc);
    val_loader_ =
        std::make_unique<data::TokenLoader>(data::find_shards(config.data.source, "val"), val_lc);
    OCTET_CHECK(train_loader_->vocab_size() <= mc.vocab_size, "train", config.data.source,
                ": the shards' vocabulary (", train_loader_->vocab_size(),
                ") exceeds the model's vocab_size (", mc.vocab_size, ")");
    if (train_loader_->vocab_size() < static_cast<uint32_t>(mc.vocab_size)) {
      std::fprintf(stderr,
                   "octet train: warning: the model's vocab_size (%lld) is larger than the "
                   "shards' tokenizer (%u pieces): %lld rows of the embedding and LM head are "
                   "never trained\n",
                   static_cast<long long>(mc.vocab_size), train_loader_->vocab_size(),
                   static_cast<long long>(mc.vocab_size - train_loader_->vocab_size()));
    }
  }

  const int64_t t = model_->tokens();
  OCTET_CHECK(config.fp8_comm == dist::Fp8Comm::none || config.precision == nn::Precision::fp8,
              "train", "--fp8-comm ", dist::fp8_comm_name(config.fp8_comm),
              " needs --precision fp8 (what travels is in the recipe's FP8 formats); "
              "this run is ",
              nn::precision_name(config.precision));
  if (world > 1) {
    const dist::AdamWConfig adamw{config.beta1, config.beta2, config.eps, config.weight_decay,
                                  config.grad_clip};
    dp_ = std::make_unique<dist::DataParallel>(
        comm_, *model_, config.zero < 0 ? 1 : config.zero, adamw,
        dist::fp8_comm_weights(config.fp8_comm),
        std::max<int64_t>(4, static_cast<int64_t>(config.bucket_mb * (1 << 20))));
    if (dist::fp8_comm_grads(config.fp8_comm)) dp_->use_fp8_gradients();
  } else {
    optimizer_ = std::make_unique<Optimizer>(*model_, config);
  }
  batch_ = Buffer(device, static_cast<size_t>(2 * t) * 4);
  inputs_ = batch_.view(DType::i32, {config.batch, seq}, 0);
  targets_ = batch_.view(DType::i32, {config.batch, seq}, static_cast<size_t>(t) * 4);
  if (device.is_cuda()) {
    host_batch_ = Buffer(Device::cpu(), batch_.bytes());
    host_inputs_ = host_batch_.view(DType::i32, {config.batch, seq}, 0);
    host_targets_ = host_batch_.view(DType::i32, {config.batch, seq}, static_cast<size_t>(t) * 4);
  }
  // A GPU runs ahead of the host: reading a step's loss would make it wait, so the
  // numbers of log_every steps are read together. The CPU has nothing to wait for.
  window_ = device.is_cpu() ? 1 : std::max<int64_t>(1, config.log_every);
  stats_ = Arena(device);
  step_loss_ = stats_.add("step loss", DType::f32, {window_});
  step_grad_sum_sq_ = stats_.add("step gradient sum of squares", DType::f32, {window_});
  eval_loss_ = stats_.add("evaluation loss", DType::f32, {1});
  stop_flag_ = stats_.add("stop request", DType::f32, {1});
  stats_.allocate();

  // A run killed while writing a checkpoint left its temporary folder: remove it now
  // (never one a live process is writing).
  if (!config.out_dir.empty() && comm_->rank() == 0) remove_stale_temp_dirs(config.out_dir);
  const bool fp8 = config_.precision == nn::Precision::fp8;
  if (fp8 && config.guard.enabled.value_or(true)) {
    model::ModelOptions bf16 = options;
    bf16.precision = nn::Precision::bf16;
    shadow_ = std::make_unique<model::Llama>(mc, bf16);
    OCTET_CHECK(shadow_->parameter_count() == model_->parameter_count(), "guard",
                "the bf16 twin's parameters differ from the fp8 model's");
    // Under data parallelism every rank judges the same global losses, so all of them act
    // alike (Trainer::switch_ranks_to_bf16).
    guard_ = std::make_unique<Guard>(config.guard, resumed && resumed->guard_passed);
  }

  if (config.resume) {
    const std::string step_dir = latest_checkpoint(config.out_dir);
    const TrainerState s =
        dp_ ? load_sharded(step_dir)
            : load_checkpoint(step_dir, *model_, optimizer_->m(), optimizer_->v());
    // Checkpoints written before the recipe's text form round-tripped say "block/hybrid".
    std::string stored_recipe = s.recipe;
    std::replace(stored_recipe.begin(), stored_recipe.end(), '/', ':');
    OCTET_CHECK(s.precision == nn::precision_name(config_.precision) &&
                    fp8::Recipe::parse(stored_recipe) == config.recipe,
                "train", "the checkpoint in ", config.out_dir, " was trained with --precision ",
                s.precision, " and recipe ", s.recipe, "; resume with the same settings");
    step_ = s.step;
    train_loader_->seek(s.data_position);
    keep_or_extend_schedule(config_, s.schedule_steps, step_);
    wall_s_ = s.wall_s;
    skipped_steps_ = s.skipped_steps;
  } else {
    model_->init_weights(config.seed);
  }
  if (comm_->rank() == 0)
    write_run_info(config, *model_);  // <out>/run.json: config, commit, machine
  if (!config_.metrics.empty()) {
    metrics_ = MetricsFile(config_.metrics, config.resume);
  }
}

Trainer::~Trainer() = default;

// One batch from a host loader onto the model's device. The copy from pageable host
// memory is queued on octet's stream and returns once the bytes are staged, so the GPU
// is not drained between micro-batches.
static void load_batch(data::TokenLoader& loader, const Tensor& inputs, const Tensor& targets,
                       const Tensor& host_inputs, const Tensor& host_targets) {
  if (inputs.device.is_cpu()) return loader.next(inputs, targets);
  loader.next(host_inputs, host_targets);
  copy_tensor(host_inputs, inputs);
  copy_tensor(host_targets, targets);
}

StepRecord Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  model::Llama& m = *model_;
  const int64_t slot = step_ % window_;
  const size_t at = static_cast<size_t>(slot) * 4;
  const Tensor loss = stats_.view(step_loss_, DType::f32, {1}, at);
  const Tensor sum_sq = stats_.view(step_grad_sum_sq_, DType::f32, {1}, at);
  zero_bytes(loss.data, loss.device, 4);
  // FP8 saturation counts cost a little in every quantization: count them only in the
  // steps whose statistics the metrics report (log steps and those that end with an
  // evaluation).
  const int64_t next = step_ + 1;
  const bool counted = next == config_.steps || next % config_.log_every == 0 ||
                       (config_.eval_every > 0 && next % config_.eval_every == 0);
  m.set_fp8_counting(counted);
  if (counted && config_.precision == nn::Precision::fp8) counted_step_ = next;
  m.zero_grads();
  const double tokens = static_cast<double>(m.tokens() * config_.grad_accum * comm_->size());
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    load_batch(*train_loader_, inputs_, targets_, host_inputs_, host_targets_);
    m.forward(inputs_, targets_, static_cast<float>(1.0 / tokens), loss, 1.0 / tokens);
    if (dp_ && micro + 1 == config_.grad_accum) dp_->last_micro_batch();  // ZeRO 2's buckets
    m.backward();
  }
  if (after_backward) after_backward(*this);
  ++step_;

  const float lr = static_cast<float>(lr_at(config_, step_));
  bool updated = true;
  if (dp_) {
    dp_->sum_over_ranks(loss);
    dp_->reduce_gradients(sum_sq);
    updated = finite_step_or_undo(*model_, loss, sum_sq);
    if (updated) dp_->update(step_, lr, sum_sq);
  } else {
    updated = optimizer_->step(step_, lr, sum_sq, loss);
  }
  skipped_in_a_row_ = updated ? 0 : skipped_in_a_row_ + 1;
  if (!updated) ++skipped_steps_;

  StepRecord r;
  r.step = step_;
  r.lr = lr;
  r.precision = nn::precision_name(config_.precision);
  r.skipped = !updated;
  r.skipped_steps = skipped_steps_;
  r.loss = r.grad_norm = std::nan("");
  // Host time to queue the step; read_back() replaces it with the measured rate.
  r.tokens_per_s = tokens / seconds_since(t0);
  return r;
}

void Trainer::read_back(std::vector<StepRecord>& records) {
  OCTET_CHECK(static_cast<int64_t>(records.size()) <= window_, "train", "read_back of ",
              records.size(), " steps, but only the last ", window_, " are kept");
  std::vector<float> losses(static_cast<size_t>(window_)), sums_sq(losses.size());
  copy_bytes(losses.data(), Device::cpu(), stats_.tensor(step_loss_).data, stats_.device(),
             losses.size() * 4);
  copy_bytes(sums_sq.data(), Device::cpu(), stats_.tensor(step_grad_sum_sq_).data, stats_.device(),
             sums_sq.size() * 4);
  for (StepRecord& r : records) {
    const size_t slot = static_cast<size_t>((r.step - 1) % window_);
    r.loss = losses[slot];
    r.grad_norm = std::sqrt(static_cast<double>(sums_sq[slot]));
  }
}

double Trainer::evaluate() {
  return evaluate(*model_);
}

double Trainer::evaluate(model::Llama& model) {
  val_loader_->seek({0, 0});
  const int64_t batches = std::max<int64_t>(1, config_.eval_batches);
  const Tensor loss = stats_.tensor(eval_loss_);
  zero_bytes(loss.data, loss.device, 4);
  const double weight = 1.0 / static_cast<double>(model.tokens() * batches * comm_->size());
  for (int64_t i = 0; i < batches; ++i) {
    load_batch(*val_loader_, inputs_, targets_, host_inputs_, host_targets_);
    model.forward(inputs_, targets_, 0.0f, loss, weight);
  }
  if (dp_) dp_->sum_over_ranks(loss);
  float mean = 0.0f;
  copy_bytes(&mean, Device::cpu(), loss.data, loss.device, 4);
  return mean;
}

std::string Trainer::save() {
  OCTET_CHECK(!config_.out_dir.empty(), "train", "no --out directory to write checkpoints to");
  TrainerState s;
  s.step = step_;
  s.data_position = train_loader_->position();
  s.precision = nn::precision_name(config_.precision);
  s.recipe = config_.recipe.str();
  s.schedule_steps = config_.schedule_steps > 0 ? config_.schedule_steps : config_.steps;
  // Shards written by `octet tokenize` carry their tokenizer; so does the checkpoint.
  if (config_.data.source != "synthetic") {
    const std::string tokenizer = config_.data.source + "/tokenizer.model";
    if (std::filesystem::exists(tokenizer)) s.tokenizer = tokenizer;
  }
  if (requested_precision_ != s.precision) s.requested_precision = requested_precision_;
  s.wall_s = wall_s_;
  s.skipped_steps = skipped_steps_;
  s.guard_passed = guard_ && guard_->last_passed();
  std::string step_dir;
  if (!dp_) {
    step_dir = save_checkpoint(config_.out_dir, *model_, optimizer_->m(), optimizer_->v(), s);
  } else {
    save_sharded(s);
    step_dir = latest_checkpoint(config_.out_dir);
  }
  // Only now that the new checkpoint and `latest` are complete may older ones go; the one a
  // guard rollback would reload stays whatever its age. Rank 0 alone reads the folder here:
  // another rank listing it while rank 0 deletes could read a checkpoint half gone (and
  // throw, leaving rank 0 in the next collective). The others read it again only after a
  // collective with rank 0, when the deleting is over.
  if (comm_->rank() == 0) {
    std::vector<std::string> keep;
    if (guard_) {
      if (const auto passed = last_passed_checkpoint(config_.out_dir, step_)) {
        keep.push_back(std::filesystem::path(passed->dir).filename().string());
      }
    }
    prune_checkpoints(config_.out_dir, config_.retention, keep);
  }
  return step_dir;
}

void Trainer::write_metrics(const StepRecord& r, bool with_fp8) {
  if (!metrics_.is_open()) return;
  static const std::vector<LayerFp8Stats> none;
  metrics_.write(r, with_fp8 ? fp8_stats_ : none);
}

namespace {

// The progress line of one reported step.
void print_progress(const StepRecord& r, int64_t steps, double left) {
  std::printf("step %6lld/%lld  loss %.4f  lr %.2e  %8.0f tok/s  %5.0fs left",
              static_cast<long long>(r.step), static_cast<long long>(steps), r.loss, r.lr,
              r.tokens_per_s, left);
  if (r.val_loss) std::printf("  val %.4f", *r.val_loss);
  if (r.skipped) {
    std::printf("  SKIPPED (non-finite loss or gradient norm; %lld skipped in all)",
                static_cast<long long>(r.skipped_steps));
  }
  if (r.guard) {
    const GuardRecord& g = *r.guard;
    std::printf("  guard fp8 %.4f bf16 %.4f gap %+.2f%% %s", g.fp8_loss, g.bf16_loss, 100.0 * g.gap,
                g.passed ? "ok" : "FAIL");
    if (!g.passed) std::printf(" (%lld in a row)", static_cast<long long>(g.strikes));
    if (g.action == "warn") std::printf(" -> warning");
    if (g.action == "fallback") std::printf(" -> fallback: bf16 from here");
    if (g.action == "rollback") {
      std::printf(" -> rollback to step %lld, bf16 from there",
                  static_cast<long long>(g.rollback_step.value_or(0)));
    }
  }
  if (!r.warnings.empty()) {
    std::printf("  warning: %s", r.warnings.front().c_str());
    if (r.warnings.size() > 1) std::printf(" (+%zu more in the metrics)", r.warnings.size() - 1);
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

std::vector<StepRecord> Trainer::run() {
  std::vector<StepRecord> records, pending;
  pending.reserve(static_cast<size_t>(window_));
  const auto t0 = std::chrono::steady_clock::now();
  const double wall0 = wall_s_;
  auto window_t0 = t0;
  const int64_t first = step_;
  int64_t reported = 0;
  bool stop = agreed_stop();
  while (step_ < config_.steps && !stop) {
    pending.push_back(train_step());
    const bool last = step_ == config_.steps;
    const bool eval = (config_.eval_every > 0 && step_ % config_.eval_every == 0) || last;
    const bool guard = guard_ && guard_->due(step_, eval);
    const bool checkpoint = !config_.out_dir.empty() && config_.checkpoint_every > 0 &&
                            step_ % config_.checkpoint_every == 0 && !last;
    // Under mpirun a local request waits for the window's end, where every rank agrees.
    if (static_cast<int64_t>(pending.size()) < window_ && !last && !eval && !guard && !checkpoint &&
        (dp_ || !stop_requested())) {
      continue;
    }
    // Read back the window's numbers (this waits for the GPU), then report each step.
    read_back(pending);
    const double tokens_per_s = static_cast<double>(pending.size() * model_->tokens() *
                                                    config_.grad_accum * comm_->size()) /
                                seconds_since(window_t0);
    // Wall time: the window's steps share its span evenly (a GPU runs them unobserved).
    const double wall_now = wall0 + seconds_since(t0);
    for (size_t i = 0; i < pending.size(); ++i) {
      pending[i].tokens_per_s = tokens_per_s;
      pending[i].wall_s = wall_s_ + (wall_now - wall_s_) * static_cast<double>(i + 1) /
                                        static_cast<double>(pending.size());
    }
    wall_s_ = wall_now;
    StepRecord& back = pending.back();
    // FP8 health of the counted step, read before an evaluation quantizes anew.
    const bool with_fp8 = back.step == counted_step_;
    if (with_fp8) {
      fp8_stats_ = gather_fp8_stats(*model_);
      back.warnings = fp8_health_warnings(fp8_stats_);
    }
    if (eval) back.val_loss = evaluate();
    const int64_t at = step_;
    if (guard) guard_check(back);
    window_t0 = std::chrono::steady_clock::now();
    for (const StepRecord& r : pending) {
      write_metrics(r, with_fp8 && &r == &back);
      ++reported;
      const bool last_of_run = r.step == config_.steps;
      if (!config_.quiet && (r.step % config_.log_every == 0 || last_of_run || r.val_loss ||
                             r.skipped || r.guard || !r.warnings.empty())) {
        const double left = seconds_since(t0) / static_cast<double>(reported) *
                            static_cast<double>(config_.steps - r.step);
        print_progress(r, config_.steps, left);
      }
      records.push_back(r);
      if (on_step) on_step(r);
    }
    pending.clear();
    OCTET_CHECK(skipped_in_a_row_ < config_.max_skipped_steps, "train", skipped_in_a_row_,
                " steps in a row (up to step ", step_,
                ") had a non-finite loss or gradient norm and were skipped (--max-skipped-steps ",
                config_.max_skipped_steps, "); stopping. ",
                config_.out_dir.empty() ? std::string("No checkpoint was written (no --out).")
                                        : "The last checkpoint in " + config_.out_dir +
                                              " is intact (the skipped steps changed no weights).",
                " Lower --lr or --grad-clip, or use --precision bf16.");
    // A rollback moved the run back: the checkpoint of this step would be the failed one.
    if (checkpoint && step_ == at) save();
    stop = agreed_stop();
  }
  if (!config_.out_dir.empty() && step_ > first) save();
  return records;
}

}  // namespace octet::train
