// cli/bench/bench_comm.cpp: `octet bench comm` (under mpirun): the collectives one
// data-parallel step makes for a model's P parameters, timed on the backend at hand (MPI
// on the CPU, NCCL on CUDA): bytes each rank sends per step (ring algorithms: (N-1)/N of
// the buffer per all-gather or reduce-scatter, twice that per all-reduce) and the achieved
// bandwidth, with the weights all-gathered in f32 (ZeRO 1 under fp32), bf16 (ZeRO 1 under
// bf16 and fp8) and FP8 as the modelled byte count and as the real --fp8-comm weights path
// (dist/fp8_weights.h on an fp8 model of the shape: each rank's shard quantized with the
// recipe, codes and scales gathered, transposed copies made); the gradients reduce-scattered in
// f32, with the block linears' in FP8 (--fp8-comm grads: an exchange of codes summed in fp32,
// dist/fp8_reduce.h), and in per-layer buckets started one after the other as ZeRO 2's
// backward does. With --memory, the bytes each rank holds per mode (fp32 master, AdamW moments,
// f32 gradients), from a bf16 model and dist::DataParallel built for each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "core/buffer.h"
#include "core/clock.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist/fp8_reduce.h"
#include "dist/fp8_weights.h"
#include "fp8/quantized_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "model/config.h"
#include "model/llama.h"

namespace octet::bench {
namespace {

struct CommOptions {
  std::string model = "small";
  std::string device = "cpu";
  std::string recipe = "tensor-current";
  int reps = 5;
  bool memory = false;
  double bucket_mb = 25;
};

// The bytes one rank holds under each --zero: what DataParallel and the model allocated.
void print_memory(const CommOptions& o, const model::LlamaConfig& config,
                  const std::shared_ptr<dist::Comm>& comm, Device device) {
  if (comm->rank() == 0) {
    std::printf("\nbytes per rank (bf16 model, --bucket-mb %g):\n%-10s %12s %12s %14s %10s\n",
                o.bucket_mb, "mode", "master MB", "moments MB", "gradients MB", "total MB");
  }
  model::ModelOptions options;
  options.precision = nn::Precision::bf16;
  options.seq_len = std::min<int64_t>(32, config.max_position_embeddings);
  options.device = device;
  for (int zero : {0, 1, 2}) {
    model::Llama model(config, options);
    const dist::DataParallel dp(
        comm, model, zero, {}, false,
        std::max<int64_t>(4, static_cast<int64_t>(o.bucket_mb * (1 << 20))));
    const double master = static_cast<double>(model.master_bytes()) / 1e6;
    const double moments = static_cast<double>(dp.moment_bytes()) / 1e6;
    const double grads = static_cast<double>(dp.gradient_bytes()) / 1e6;
    if (comm->rank() == 0) {
      std::printf("--zero %-3d %12.2f %12.2f %14.2f %10.2f\n", zero, master, moments, grads,
                  master + moments + grads);
    }
  }
}

// Median seconds of `reps` runs of f, each ended by a barrier on every rank.
template <typename F>
double time_median(dist::Comm& comm, int reps, F f) {
  std::vector<double> t;
  f();  // warm-up
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    comm.barrier();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int bench_comm(const CommOptions& o) {
  const Device device = device_from_name(o.device);
  const std::shared_ptr<dist::Comm> comm = dist::launch(device);
  const int n = comm->size();
  OCTET_CHECK(n > 1, "bench comm", "run it under mpirun with more than one rank, e.g. ",
              "mpirun -np 2 octet bench comm");
  const model::LlamaConfig config = model::load_llama_config(o.model);
  const int64_t p = config.parameter_count();
  const dist::Partition part(p, n);
  Buffer full = Buffer::for_tensor(device, DType::f32, {p});
  Buffer shard = Buffer::for_tensor(device, DType::f32, {std::max<int64_t>(1, part.count(0))});
  zero_bytes(full.data(), device, full.bytes());
  const Tensor f32 = full.tensor(DType::f32, {p});
  const Tensor mine = shard.tensor(DType::f32, {part.count(comm->rank())});
  struct Row {
    const char* what;
    double buffer_bytes, wire_factor;
    std::function<void()> run;
    double sent = -1;  // bytes each rank sends, where not buffer_bytes x wire_factor
  };
  // The parameter layout of model::Llama: the embedding, then each layer's seven matrices
  // (the FP8 range, one bucket per layer), then the LM head and the norm weights.
  const int64_t d = config.hidden_size, hd = config.head_dim();
  const int64_t layer = d * hd * (2 * config.num_attention_heads + 2 * config.num_key_value_heads) +
                        3 * d * config.intermediate_size;
  const int64_t first = config.vocab_size * d, last = first + config.num_hidden_layers * layer;
  dist::GradReduceScatter fp8_grads(comm, part, first, last, DType::e5m2, device);
  // The real FP8 weight path on an fp8 model of the shape (activations for 16 tokens).
  model::ModelOptions mo;
  mo.precision = nn::Precision::fp8;
  mo.recipe = fp8::Recipe::parse(o.recipe);
  mo.batch = 1;
  mo.seq_len = std::min<int64_t>(16, config.max_position_embeddings);
  mo.device = device;
  model::Llama fp8_model(config, mo);
  const dist::Partition aligned = dist::aligned_partition(p, n, fp8_model.block_weights(),
                                                          dist::weight_row_alignment(mo.recipe));
  fp8_model.shard_master(aligned.begin(comm->rank()), aligned.end(comm->rank()));
  fp8_model.init_weights(1);
  dist::WeightAllGather fp8_weights(comm, fp8_model, aligned);
  // What --fp8-comm none gathers of the same range: its bf16 working weights.
  std::vector<int64_t> block_at;
  for (int r = 0; r <= n; ++r) {
    block_at.push_back(
        std::clamp(r < n ? aligned.begin(r) : p, fp8_weights.begin(), fp8_weights.end()) -
        fp8_weights.begin());
  }
  const dist::Partition block_part(block_at);
  const Tensor block_bf16(static_cast<uint16_t*>(full.data()) + fp8_weights.begin(), DType::bf16,
                          {fp8_weights.end() - fp8_weights.begin()}, device);
  // What --fp8-comm none then does with them: every rank quantizes each whole weight (and its
  // transposed copy) in its first forward, which the FP8 path's copies replace.
  std::vector<fp8::QuantizedTensor> whole;
  fp8::DelayedScalingState whole_state(device, mo.recipe.delayed);
  const std::vector<model::BlockWeight> block_weights = fp8_model.block_weights();
  for (const model::BlockWeight& w : block_weights) {
    whole.emplace_back(device, w.rows, w.cols, mo.recipe, fp8::Role::weight, true);
    whole.back().use_scaling_state(whole_state);
  }
  whole_state.allocate();
  const auto gather_and_quantize = [&] {
    comm->all_gather(block_bf16, block_part);
    for (size_t i = 0; i < whole.size(); ++i) {
      const model::BlockWeight& w = block_weights[i];
      fp8::quantize(Tensor(static_cast<uint16_t*>(full.data()) + w.offset, DType::bf16,
                           {w.rows, w.cols}, device),
                    whole[i], mo.recipe);
    }
  };
  const std::string fp8_weights_name = "all-gather fp8 block linears (" + mo.recipe.str() + ")";
  const double ring = static_cast<double>(n - 1) / n;
  const std::vector<Row> rows = {
      {"all-reduce f32 (ZeRO 0 gradients)", 4.0 * p, 2 * ring,
       [&] { comm->all_reduce(f32, dist::ReduceOp::sum); }},
      {"reduce-scatter f32 (ZeRO 1 gradients)", 4.0 * p, ring,
       [&] { comm->reduce_scatter(f32, mine, part); }},
      {"reduce-scatter fp8 grads (w+grads)", 4.0 * p, ring, [&] { fp8_grads.run(f32, mine); },
       static_cast<double>(fp8_grads.bytes_sent())},
      {"reduce-scatter f32 buckets (ZeRO 2)", 4.0 * p, ring,
       [&] {
         for (int64_t l = config.num_hidden_layers - 1; l >= 0; --l)
           comm->start_reduce_scatter(f32, mine, part, first + l * layer, first + (l + 1) * layer);
         comm->start_reduce_scatter(f32, mine, part, 0, first);
         comm->start_reduce_scatter(f32, mine, part, last, p);
         comm->wait_started();
       }},
      {"all-gather f32 (ZeRO 1, fp32)", 4.0 * p, ring, [&] { comm->all_gather(f32, part); }},
      {"all-gather bf16 (ZeRO 1, bf16/fp8)", 2.0 * p, ring,
       [&] { comm->all_gather(full.tensor(DType::bf16, {p}), part); }},
      {"all-gather fp8 (--fp8-comm weights)", 1.0 * p, ring,
       [&] { comm->all_gather(full.tensor(DType::e4m3, {p}), part); }},
      {"all-gather bf16 of the block linears", 2.0 * (fp8_weights.end() - fp8_weights.begin()),
       ring, [&] { comm->all_gather(block_bf16, block_part); },
       static_cast<double>(fp8_weights.bf16_bytes_received())},
      {"all-gather bf16 block linears + quantize", 2.0 * (fp8_weights.end() - fp8_weights.begin()),
       ring, gather_and_quantize, static_cast<double>(fp8_weights.bf16_bytes_received())},
      {fp8_weights_name.c_str(), 1.0 * (fp8_weights.end() - fp8_weights.begin()), ring,
       [&] { fp8_weights.run(); }, static_cast<double>(fp8_weights.bytes_received())},
  };
  if (comm->rank() == 0) {
    std::printf("octet bench comm: %s, %lld parameters, %d ranks over %s, median of %d\n",
                o.model.c_str(), static_cast<long long>(p), n, comm->backend().c_str(), o.reps);
    std::printf("%-46s %12s %12s %10s %12s\n", "collective", "buffer MB", "sent MB/rank", "ms",
                "bus GB/s");
  }
  for (const Row& r : rows) {
    const double s = time_median(*comm, o.reps, r.run);
    const double sent = r.sent >= 0 ? r.sent : r.buffer_bytes * r.wire_factor;
    if (comm->rank() == 0)
      // GB/s to 3 significant digits: a slow tiny collective (0.06 MB in 16 ms on a loaded
      // machine) printed 0.00 with two decimals.
      std::printf("%-46s %12.1f %12.1f %10.2f %12.3g\n", r.what, r.buffer_bytes / 1e6, sent / 1e6,
                  s * 1e3, sent / s / 1e9);
  }
  if (o.memory) print_memory(o, config, comm, device);
  return 0;
}

}  // namespace

void add_bench_comm(cli::Commands& commands, CLI::App& bench) {
  auto o = std::make_shared<CommOptions>();
  CLI::App* c =
      commands.add(bench, "comm", "time the data-parallel collectives of one step (under mpirun)",
                   [o] { return bench_comm(*o); });
  c->add_option("--model", o->model, "tiny, small, 1b, 7b or a config.json path");
  c->add_option("--device", o->device, "cpu (MPI) or cuda (NCCL)");
  c->add_option("--recipe", o->recipe, "the FP8 recipe of the real --fp8-comm weights path");
  c->add_option("--reps", o->reps, "timed repetitions (the median is printed)")
      ->check(CLI::Range(1, 1000));
  c->add_flag("--memory", o->memory,
              "also the bytes each rank holds under --zero 0, 1 and 2 (a bf16 model built per "
              "mode)");
  c->add_option("--bucket-mb", o->bucket_mb, "--zero 2's gradient bucket size in MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace octet::bench
