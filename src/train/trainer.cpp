// train/trainer.cpp: the training loop, one optimizer step at a time.
#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/synthetic.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "fp8/recipe.h"
#include "train/checkpoint.h"

namespace octet::train {
namespace {

std::atomic<bool> g_stop{false};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  const double span = static_cast<double>(std::max<int64_t>(1, c.steps - c.warmup));
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
  model::ModelOptions options;
  options.precision = config.precision;
  options.recipe = config.recipe;
  options.batch = config.batch;
  options.seq_len = config.seq_len;
  options.device = device;
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
  }

  const int64_t t = model_->tokens();
  if (world > 1) {
    const dist::AdamWConfig adamw{config.beta1, config.beta2, config.eps, config.weight_decay,
                                  config.grad_clip};
    dp_ = std::make_unique<dist::DataParallel>(comm_, *model_, config.zero < 0 ? 1 : config.zero,
                                               adamw);
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
  stats_.allocate();

  if (config.resume) {
    OCTET_CHECK(!config.out_dir.empty(), "train", "--resume needs --out DIR");
    const auto [m, v] = dp_ ? dp_->full_moments() : std::pair{optimizer_->m(), optimizer_->v()};
    const TrainerState s = load_checkpoint(latest_checkpoint(config.out_dir), *model_, m, v);
    if (dp_) dp_->moments_loaded();
    // Checkpoints written before the recipe's text form round-tripped say "block/hybrid".
    std::string stored_recipe = s.recipe;
    std::replace(stored_recipe.begin(), stored_recipe.end(), '/', ':');
    OCTET_CHECK(s.precision == nn::precision_name(config.precision) &&
                    fp8::Recipe::parse(stored_recipe) == config.recipe,
                "train", "the checkpoint in ", config.out_dir, " was trained with --precision ",
                s.precision, " and recipe ", s.recipe, "; resume with the same settings");
    step_ = s.step;
    train_loader_->seek(s.data_position);
  } else {
    model_->init_weights(config.seed);
  }
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
  // steps whose statistics the metrics report (those that end with an evaluation).
  const int64_t next = step_ + 1;
  m.set_fp8_counting(next == config_.steps ||
                     (config_.eval_every > 0 && next % config_.eval_every == 0));
  m.zero_grads();
  const double tokens = static_cast<double>(m.tokens() * config_.grad_accum * comm_->size());
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    load_batch(*train_loader_, inputs_, targets_, host_inputs_, host_targets_);
    m.forward(inputs_, targets_, static_cast<float>(1.0 / tokens), loss, 1.0 / tokens);
    m.backward();
  }
  ++step_;

  const float lr = static_cast<float>(lr_at(config_, step_));
  if (dp_) {
    dp_->sum_over_ranks(loss);
    dp_->step(step_, lr, sum_sq);
  } else {
    optimizer_->step(step_, lr, sum_sq);
  }

  StepRecord r;
  r.step = step_;
  r.lr = lr;
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
  val_loader_->seek({0, 0});
  const int64_t batches = std::max<int64_t>(1, config_.eval_batches);
  const Tensor loss = stats_.tensor(eval_loss_);
  zero_bytes(loss.data, loss.device, 4);
  const double weight = 1.0 / static_cast<double>(model_->tokens() * batches * comm_->size());
  for (int64_t i = 0; i < batches; ++i) {
    load_batch(*val_loader_, inputs_, targets_, host_inputs_, host_targets_);
    model_->forward(inputs_, targets_, 0.0f, loss, weight);
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
  if (!dp_) return save_checkpoint(config_.out_dir, *model_, optimizer_->m(), optimizer_->v(), s);
  // Every rank holds the whole master; the moments are gathered, rank 0 writes the files.
  const auto [m, v] = dp_->full_moments();
  if (comm_->rank() == 0) save_checkpoint(config_.out_dir, *model_, m, v, s);
  dp_->drop_full_moments();
  comm_->barrier();
  return latest_checkpoint(config_.out_dir);
}

void Trainer::write_metrics(const StepRecord& r) {
  if (!metrics_.is_open()) return;
  std::vector<LayerFp8Stats> fp8;
  if (r.val_loss) {
    for (const auto& [name, stats] : model_->fp8_stats()) fp8.emplace_back(name, stats.layer);
  }
  metrics_.write(r, fp8);
}

std::vector<StepRecord> Trainer::run() {
  std::vector<StepRecord> records, pending;
  pending.reserve(static_cast<size_t>(window_));
  const auto t0 = std::chrono::steady_clock::now();
  auto window_t0 = t0;
  const int64_t first = step_;
  while (step_ < config_.steps && !stop_requested()) {
    pending.push_back(train_step());
    const bool last = step_ == config_.steps;
    const bool eval = (config_.eval_every > 0 && step_ % config_.eval_every == 0) || last;
    const bool checkpoint = !config_.out_dir.empty() && config_.checkpoint_every > 0 &&
                            step_ % config_.checkpoint_every == 0 && !last;
    if (static_cast<int64_t>(pending.size()) < window_ && !last && !eval && !checkpoint &&
        !stop_requested()) {
      continue;
    }
    // Read back the window's numbers (this waits for the GPU), then report each step.
    read_back(pending);
    const double tokens_per_s = static_cast<double>(pending.size() * model_->tokens() *
                                                    config_.grad_accum * comm_->size()) /
                                seconds_since(window_t0);
    for (StepRecord& r : pending) r.tokens_per_s = tokens_per_s;
    if (eval) pending.back().val_loss = evaluate();
    window_t0 = std::chrono::steady_clock::now();
    for (const StepRecord& r : pending) {
      write_metrics(r);
      const bool last_of_run = r.step == config_.steps;
      if (!config_.quiet && (r.step % config_.log_every == 0 || last_of_run || r.val_loss)) {
        const double elapsed = seconds_since(t0);
        const double left = elapsed / static_cast<double>(r.step - first) *
                            static_cast<double>(config_.steps - r.step);
        std::printf("step %6lld/%lld  loss %.4f  lr %.2e  %8.0f tok/s  %5.0fs left",
                    static_cast<long long>(r.step), static_cast<long long>(config_.steps), r.loss,
                    r.lr, r.tokens_per_s, left);
        if (r.val_loss) std::printf("  val %.4f", *r.val_loss);
        std::printf("\n");
        std::fflush(stdout);
      }
      records.push_back(r);
      if (on_step) on_step(r);
    }
    pending.clear();
    if (checkpoint) save();
  }
  if (!config_.out_dir.empty() && step_ > first) save();
  return records;
}

}  // namespace octet::train
