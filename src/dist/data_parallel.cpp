// dist/data_parallel.cpp: the data-parallel optimizer step, ZeRO 0, 1 and 2.
#include "dist/data_parallel.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "dist/fp8_weights.h"
#include "kernels/elementwise.h"
#include "kernels/optimizer.h"

namespace octet::dist {
namespace {

// Elements [begin, end) of a contiguous tensor.
Tensor range(const Tensor& t, int64_t begin, int64_t end) {
  return t.elements(begin, end);
}

Buffer f32_buffer(Device device, int64_t n) {
  Buffer b = Buffer::for_tensor(device, DType::f32, {std::max<int64_t>(1, n)});
  zero_bytes(b.data(), device, b.bytes());
  return b;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<Comm> comm, model::Llama& model, int zero,
                           const AdamWConfig& adamw, bool fp8_weights, int64_t bucket_bytes)
    : comm_(std::move(comm)), model_(model), zero_(zero), adamw_(adamw) {
  OCTET_CHECK(zero >= 0 && zero <= 2, "dist", "--zero ", zero,
              " is not available: 0 (all-reduce), 1 (sharded optimizer state) or 2 (and "
              "sharded gradients, reduce-scattered in buckets during the backward)");
  const int64_t p = model.parameter_count();
  const Device device = model.options().device;
  OCTET_CHECK(!fp8_weights || (model.options().precision == nn::Precision::fp8 && zero >= 1),
              "dist",
              "--fp8-comm weights needs --precision fp8 and --zero 1 or 2 (under ZeRO 0 every "
              "rank updates every weight and gathers none)");
  OCTET_CHECK(!fp8_weights || !(model.options().recipe.in_bf16(fp8::Gemm::forward) ||
                                model.options().recipe.in_bf16(fp8::Gemm::dgrad)),
              "dist", "--fp8-comm weights: the recipe ", model.options().recipe.str(),
              " runs forward or dgrad in bf16, which reads the bf16 weights that --fp8-comm "
              "weights does not gather; drop bf16=forward/dgrad or the flag");
  partition_ = fp8_weights ? aligned_partition(p, comm_->size(), model.block_weights(),
                                               weight_row_alignment(model.options().recipe))
                           : Partition(p, comm_->size());
  const int64_t local = zero == 0 ? p : partition_.count(comm_->rank());
  m_ = f32_buffer(device, local);
  v_ = f32_buffer(device, local);
  if (zero >= 1) {
    grad_shard_ = f32_buffer(device, local);
    // The fp32 master of this rank's shard only (ZeRO 1 and 2 for real); the working weights
    // (bf16, or the master itself under fp32) stay whole and are gathered after updates.
    model_.shard_master(partition_.begin(comm_->rank()), partition_.end(comm_->rank()));
  }
  if (zero == 2) {
    // The backward writes the gradients into the buckets: the model's buffer of all P goes.
    buckets_ = std::make_unique<GradBuckets>(model, bucket_bytes);
    model_.place_grads(buckets_->placement());
    model_.set_backward_hook([this](int64_t hook) { on_backward(hook); });
  }
  if (fp8_weights) {
    fp8_weights_ = std::make_unique<WeightAllGather>(comm_, model_, partition_);
    model_.set_fp8_weight_source([this] { fp8_weights_->run(); });
    plan_gather_around();
  }
}

DataParallel::~DataParallel() {
  if (zero_ == 2) model_.set_backward_hook(nullptr);
  if (fp8_weights_) model_.set_fp8_weight_source(nullptr);
}

void DataParallel::last_micro_batch() {
  armed_ = zero_ == 2;
}

Tensor DataParallel::grad_shard() const {
  const int64_t count = partition_.count(comm_->rank());
  return range(grad_shard_.tensor(DType::f32, {std::max<int64_t>(1, count)}), 0, count);
}

size_t DataParallel::gradient_bytes() const {
  return model_.grad_bytes() + grad_shard_.bytes() + (buckets_ ? buckets_->bytes() : 0);
}

void DataParallel::on_backward(int64_t hook) {
  const std::vector<GradBucket>& all = buckets_->buckets();
  const auto slotted = static_cast<size_t>(buckets_->slotted());
  for (size_t k = 0; k < slotted; ++k) {
    if (all[k].done_at != hook) continue;
    start_bucket(all[k]);
    if (k + 1 == slotted) continue;
    // Bucket k + 1 is written next, into the slot of bucket k - 1: once that one's
    // reduce-scatter is done (all but bucket k's, just started).
    if (k + 1 >= 2) comm_->wait_started_but(1);
    const Tensor next = buckets_->storage(all[k + 1]);
    zero_bytes(next.data, next.device, next.nbytes());
  }
  if (hook != -1) return;
  // The end of the backward: the norm weights (and a tied embedding) too.
  for (size_t k = slotted; k < all.size(); ++k) start_bucket(all[k]);
  if (armed_) {  // the step's last micro-batch: reduce_gradients() waits
    armed_ = false;
    started_ = true;
    return;
  }
  // An earlier micro-batch: its sum joins the shard before the next backward writes the
  // buckets again, from the first one and those with memory of their own.
  finish_started();
  ++micro_;
  for (size_t k = 0; k < all.size(); ++k) {
    if (k != 0 && k < slotted) continue;
    const Tensor t = buckets_->storage(all[k]);
    zero_bytes(t.data, t.device, t.nbytes());
  }
}

void DataParallel::start_bucket(const GradBucket& b) {
  const Tensor grads = buckets_->storage(b), shard = grad_shard();
  const bool fp8 = fp8_grads_ && b.first_layer >= 0;  // a group of layers' matrices
  if (micro_ > 0 && !fp8) {
    // The earlier micro-batches' sum joins this rank's part of the bucket; the
    // reduce-scatter then writes the step's total over it. (FP8 buckets add on receipt.)
    const int r = comm_->rank();
    const int64_t from = std::max(b.lo, partition_.begin(r)),
                  to = std::min(b.hi, partition_.end(r));
    if (to > from) {
      const Tensor mine = range(grads, from - b.lo, to - b.lo);
      kernels::add(mine, range(shard, from - partition_.begin(r), to - partition_.begin(r)), mine);
    }
  }
  if (fp8) {
    fp8_grads_->start_bucket(grads, b.lo, b.hi);
  } else {
    comm_->start_reduce_scatter(grads, shard, partition_, b.lo, b.hi);
  }
  ++buckets_started_;
}

void DataParallel::finish_started() {
  comm_->wait_started();
  if (fp8_grads_) fp8_grads_->finish_buckets(grad_shard(), micro_ > 0);
}

void DataParallel::use_fp8_gradients() {
  const model::LlamaConfig& c = model_.config();
  if (c.num_hidden_layers == 0) return;  // no block linears
  // The block matrices are contiguous: from layer 0's q_proj to the last down_proj.
  const model::ParamInfo& first = model_.param("model.layers.0.self_attn.q_proj.weight");
  const model::ParamInfo& last = model_.param(
      "model.layers." + std::to_string(c.num_hidden_layers - 1) + ".mlp.down_proj.weight");
  const Device device = model_.options().device;
  int layer_buckets = 0;  // ZeRO 2: the buckets of layers' matrices, started in FP8
  if (buckets_) {
    for (const GradBucket& b : buckets_->buckets()) layer_buckets += b.first_layer >= 0;
  }
  fp8_grads_ = std::make_unique<GradReduceScatter>(
      comm_, partition_, first.offset, last.offset + last.shape.numel(),
      model_.options().recipe.format(fp8::Role::gradient), device, layer_buckets);
  // ZeRO 0 holds the reduced gradients whole: the FP8 reduce-scatter, then an all-gather.
  if (zero_ == 0 && !grad_shard_.data())
    grad_shard_ = f32_buffer(device, partition_.count(comm_->rank()));
}

void DataParallel::sum_over_ranks(const Tensor& scalar) {
  comm_->all_reduce(scalar, ReduceOp::sum);
}

void DataParallel::adamw(const Tensor& master, const Tensor& grads, const Tensor& m,
                         const Tensor& v, int64_t first, double lr, int64_t step,
                         const Tensor& grad_sum_sq) {
  // master, grads, m, v: the parameters [first, first + n); matrices (decayed) come first.
  const int64_t nd = model_.decayed_count();
  kernels::AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(adamw_.beta1);
  s.beta2 = static_cast<float>(adamw_.beta2);
  s.eps = static_cast<float>(adamw_.eps);
  s.step = step;
  s.max_grad_norm = static_cast<float>(std::max(0.0, adamw_.grad_clip));
  s.weight_decay = static_cast<float>(adamw_.weight_decay);
  kernels::adamw_step_decayed_first(master, grads, m, v, first, nd, s, grad_sum_sq);
}

void DataParallel::step(int64_t step, double lr, const Tensor& grad_sum_sq) {
  reduce_gradients(grad_sum_sq);
  update(step, lr, grad_sum_sq);
}

void DataParallel::reduce_gradients(const Tensor& grad_sum_sq) {
  const int r = comm_->rank();
  const int64_t begin = partition_.begin(r), end = partition_.end(r);
  // The gradients summed over ranks: all of them (ZeRO 0) or this rank's shard (ZeRO 1 and 2).
  if (zero_ == 2) {
    // The buckets the backward started (the last micro-batch's, in flight unless the caller
    // skipped last_micro_batch()); every element of the shard is in one.
    shard_ = grad_shard();
    if (started_) finish_started();
    started_ = false;
    micro_ = 0;
  } else if (fp8_grads_) {
    const Tensor grads = model_.grads();
    // Each rank's shard summed in fp32 from FP8 chunks (ZeRO 0: then gathered whole).
    const Tensor shard =
        range(grad_shard_.tensor(DType::f32, {std::max<int64_t>(1, end - begin)}), 0, end - begin);
    fp8_grads_->run(grads, shard);
    if (zero_ == 0) {
      copy_bytes(static_cast<float*>(grads.data) + begin, grads.device, shard.data, shard.device,
                 static_cast<size_t>(end - begin) * 4);
      comm_->all_gather(grads, partition_);
      shard_ = range(grads, begin, end);
    } else {
      shard_ = shard;
    }
  } else if (zero_ == 0) {
    const Tensor grads = model_.grads();
    comm_->all_reduce(grads, ReduceOp::sum);
    shard_ = range(grads, begin, end);
  } else {
    shard_ =
        range(grad_shard_.tensor(DType::f32, {std::max<int64_t>(1, end - begin)}), 0, end - begin);
    comm_->reduce_scatter(model_.grads(), shard_, partition_);
  }
  // The global norm: each rank's shard's sum of squares, summed over ranks. ZeRO 0 sums in
  // the same order as ZeRO 1, so the two modes update bit for bit alike.
  if (end > begin) {
    kernels::sum_of_squares(shard_, grad_sum_sq);
  } else {
    zero_bytes(grad_sum_sq.data, grad_sum_sq.device, 4);
  }
  comm_->all_reduce(grad_sum_sq, ReduceOp::sum);
}

void DataParallel::update(int64_t step, double lr, const Tensor& grad_sum_sq) {
  const int r = comm_->rank();
  const int64_t begin = partition_.begin(r), end = partition_.end(r), p = partition_.total();
  const Tensor m = m_.tensor(DType::f32, {std::max<int64_t>(1, m_.bytes() / 4)});
  const Tensor v = v_.tensor(DType::f32, {std::max<int64_t>(1, v_.bytes() / 4)});
  if (zero_ == 0) {
    adamw(model_.master(), model_.grads(), range(m, 0, p), range(v, 0, p), 0, lr, step,
          grad_sum_sq);
    model_.sync_working_weights();
  } else {
    // This rank's fp32 master shard is updated and rounded into its range of the working
    // weights, which are then gathered: bf16 under bf16/fp8 (half fp32's bytes), f32 under
    // fp32 (where the master is the working weights).
    const int64_t at = begin - model_.master_begin();
    if (end > begin) {
      adamw(range(model_.master_shard(), at, at + end - begin), shard_, range(m, 0, end - begin),
            range(v, 0, end - begin), begin, lr, step, grad_sum_sq);
    }
    model_.sync_working_weights();
    gather_working();
  }
  // Delayed FP8 scaling: every rank saw its own activations and gradients; the new scales
  // come from the amax over all ranks (the older history columns are equal everywhere).
  for (const auto& [name, tensor] : model_.scaling_state_tensors()) {
    if (name == "fp8.amax_history") comm_->all_reduce(tensor, ReduceOp::max);
  }
  model_.update_scaling();
}

std::pair<Tensor, Tensor> DataParallel::full_moments() {
  const int64_t p = partition_.total();
  if (zero_ == 0) {
    return {m_.tensor(DType::f32, {p}), v_.tensor(DType::f32, {p})};
  }
  const Device device = model_.options().device;
  const int r = comm_->rank();
  const int64_t begin = partition_.begin(r), count = partition_.count(r);
  // The master too, whole until drop_full_moments() or moments_loaded() shards it again.
  if (!model_.master_whole()) {
    model_.shard_master(0, p);
    comm_->all_gather(model_.master(), partition_);
  }
  full_m_ = f32_buffer(device, p);
  full_v_ = f32_buffer(device, p);
  const Tensor fm = full_m_.tensor(DType::f32, {p}), fv = full_v_.tensor(DType::f32, {p});
  for (auto [full, local] : {std::pair{fm, &m_}, std::pair{fv, &v_}}) {
    copy_bytes(static_cast<float*>(full.data) + begin, device, local->data(), device,
               static_cast<size_t>(count) * 4);
    comm_->all_gather(full, partition_);
  }
  return {fm, fv};
}

void DataParallel::moments_loaded() {
  if (zero_ == 0) return;
  OCTET_CHECK(full_m_.data() && full_v_.data(), "dist",
              "moments_loaded() without full_moments() first");
  const Device device = model_.options().device;
  const int r = comm_->rank();
  const int64_t begin = partition_.begin(r), count = partition_.count(r);
  copy_bytes(m_.data(), device, static_cast<const float*>(full_m_.data()) + begin, device,
             static_cast<size_t>(count) * 4);
  copy_bytes(v_.data(), device, static_cast<const float*>(full_v_.data()) + begin, device,
             static_cast<size_t>(count) * 4);
  drop_full_moments();
}

void DataParallel::drop_full_moments() {
  full_m_ = Buffer();
  full_v_ = Buffer();
  if (zero_ >= 1)
    model_.shard_master(partition_.begin(comm_->rank()), partition_.end(comm_->rank()));
}

DataParallel::Shard DataParallel::optimizer_shard() const {
  const int r = comm_->rank();
  const int64_t begin = partition_.begin(r), count = partition_.count(r);
  const int64_t at = begin - model_.master_begin(), local = zero_ == 0 ? begin : 0;
  const Device device = model_.options().device;
  auto* m = static_cast<float*>(m_.data()) + local;
  auto* v = static_cast<float*>(v_.data()) + local;
  return {begin, range(model_.master_shard(), at, at + count),
          Tensor(m, DType::f32, {count}, device), Tensor(v, DType::f32, {count}, device)};
}

void DataParallel::master_loaded() {
  model_.sync_working_weights();
  if (zero_ >= 1) comm_->all_gather(model_.working(), partition_);
}

void DataParallel::gather_whole_master() {
  if (model_.master_whole()) return;
  model_.shard_master(0, partition_.total());
  comm_->all_gather(model_.master(), partition_);
}

void DataParallel::gather_master_on_root() {
  if (model_.master_whole()) return;
  const bool root = comm_->rank() == 0;
  if (root) model_.shard_master(0, partition_.total());
  comm_->gather(root ? model_.master() : model_.master_shard(), partition_, 0);
}

void DataParallel::reshard_master() {
  if (zero_ >= 1)
    model_.shard_master(partition_.begin(comm_->rank()), partition_.end(comm_->rank()));
}

void DataParallel::gather_master(const Tensor& full) {
  OCTET_CHECK(full.dtype == DType::f32 && full.numel() == partition_.total(), "dist",
              "gather_master: needs f32 [", partition_.total(), "], got ", full.str());
  const int64_t first = model_.master_begin(), n = model_.master_end() - first;
  copy_bytes(static_cast<float*>(full.data) + first, full.device, model_.master_shard().data,
             model_.options().device, static_cast<size_t>(n) * 4);
  if (!model_.master_whole()) comm_->all_gather(full, partition_);
}

}  // namespace octet::dist
