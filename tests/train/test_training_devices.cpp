// tests/train/test_training_devices.cpp: the model and the trainer on a GPU against the
// CPU: the same weights and batch give the same fp32 loss and gradients, bf16 and fp8
// stay on fp32 on each device, training converges as on the CPU, and steps allocate
// nothing on any device. The cuda instances skip (reported skipped) without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/llama.h"
#include "temp_dir.h"
#include "testing.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {

struct Pass {
  double loss;
  std::vector<float> grads;
};

// One forward and backward of tiny on `device` from the weights of `seed`.
Pass forward_backward(Device device, nn::Precision precision, uint64_t seed,
                      const std::vector<int32_t>& ids) {
  const model::LlamaConfig c = model::llama_config_by_name("tiny");
  model::ModelOptions o;
  o.precision = precision;
  o.batch = 2;
  o.device = device;
  model::Llama m(c, o);
  m.init_weights(seed);
  const int64_t t = m.tokens();
  Buffer batch(device, static_cast<size_t>(2 * t) * 4);
  copy_bytes(batch.data(), device, ids.data(), Device::cpu(), batch.bytes());
  const Tensor inputs = batch.view(DType::i32, {2, c.max_position_embeddings}, 0);
  const Tensor targets =
      batch.view(DType::i32, {2, c.max_position_embeddings}, static_cast<size_t>(t) * 4);
  Pass p;
  m.zero_grads();
  p.loss = m.forward(inputs, targets, 1.0f / static_cast<float>(t));
  m.backward();
  p.grads.resize(static_cast<size_t>(m.parameter_count()));
  copy_bytes(p.grads.data(), Device::cpu(), m.grads().data, device, p.grads.size() * 4);
  return p;
}

double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / norm);
}

TEST(CudaLlama, SameWeightsAndBatchGiveTheCpuLossAndGradients) {
  OCTET_SKIP_WITHOUT(Device::cuda(0));
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = model::llama_config_by_name("tiny").vocab_size;
  std::vector<int32_t> ids(2 * 2 * 64);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  const uint64_t seed = rng();
  double fp32_loss[2] = {0, 0};
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16, nn::Precision::fp8}) {
    const Pass cpu = forward_backward(Device::cpu(), precision, seed, ids);
    const Pass gpu = forward_backward(Device::cuda(0), precision, seed, ids);
    const char* name = nn::precision_name(precision);
    if (precision == nn::Precision::fp32) {
      fp32_loss[0] = cpu.loss, fp32_loss[1] = gpu.loss;
      // Both devices evaluate the same formulas in fp32 in different orders. Each of
      // the ~12 operations a logit passes through in tiny errs by at most gamma_K
      // (K <= 176: 1.05e-5) relative to its magnitudes, so the logits (|z| < 1 at
      // initialisation) differ by < 2 * 12 * 1.05e-5 and the loss, whose gradient in
      // the logits has a 1-norm of at most 2 per token, by < 2 * 2.6e-4 * max|z|: 1e-3
      // of a loss of ~5.5 nats is above that with room for the softmax and the mean.
      EXPECT_NEAR(gpu.loss, cpu.loss, 1e-3) << name;
      // Gradients pass through about twice as many operations; relative to their norm
      // the same reasoning gives a few 1e-4.
      EXPECT_LE(relative_distance(gpu.grads, cpu.grads), 1e-3) << name;
    } else {
      // bf16 (and FP8 for the block linears) perturb every stored value by at most
      // their unit roundoff (2^-8; FP8 2^-4 relative), and at initialisation the
      // logits are tiny, so on each device the loss stays within 1% of that device's
      // fp32 loss (the same bound as Llama.Bf16AndFp8LossesStayNearFp32).
      EXPECT_NEAR(cpu.loss, fp32_loss[0], 0.01 * fp32_loss[0]) << name << " cpu";
      EXPECT_NEAR(gpu.loss, fp32_loss[1], 0.01 * fp32_loss[1]) << name << " cuda";
      // Where both devices' fp32 values round to different neighbours, a stored value
      // differs by one bf16 (FP8) ulp: the gradients stay within a few of those units
      // relative to their norm: 2^-6 (2^-3 for FP8) is well above that.
      const double bound = precision == nn::Precision::bf16 ? 0x1p-6 : 0x1p-3;
      EXPECT_LE(relative_distance(gpu.grads, cpu.grads), bound) << name;
    }
  }
}

// On the emulated device (cudasim: every CUDA thread a fiber, under ASan) a tiny step of
// 8 x 64 tokens takes tens of seconds; the step tests there run 2 x 32-token batches (still
// several blocks per kernel) with one validation batch.
void shrink_for_emulation(TrainConfig& c) {
#if defined(OCTET_CUDASIM)
  c.batch = 2;
  c.seq_len = 32;
  c.eval_batches = 1;
#else
  (void)c;
#endif
}

TEST(CudaTraining, Fp32StepsFollowTheCpuStepForStep) {
  OCTET_SKIP_WITHOUT(Device::cuda(0));
  std::vector<double> loss[2];
  for (int d = 0; d < 2; ++d) {
    TrainConfig c = tiny_run("tiny", nn::Precision::fp32, 10);
    shrink_for_emulation(c);  // on both devices: the CPU run is the reference
    c.device = d == 0 ? "cpu" : "cuda";
    c.log_every = 4;  // the GPU reads back every 4 steps and at the end
    Trainer trainer(c);
    for (const StepRecord& r : trainer.run()) loss[d].push_back(r.loss);
  }
  ASSERT_EQ(loss[0].size(), 10u);
  ASSERT_EQ(loss[1].size(), 10u);
  // The first step's loss differs by fp32 rounding only (< 1e-3, CudaLlama above); the
  // updates then differ by the relative rounding of the gradients (~1e-4) times the
  // learning rate (<= 1e-2) per step, which moves weights of scale 0.02 and the loss
  // by far less than 1e-3 within 10 steps.
  for (size_t i = 0; i < loss[0].size(); ++i) {
    EXPECT_NEAR(loss[1][i], loss[0][i], 1e-3) << "step " << i + 1;
  }
}

// The run that must reach the entropy floor. On a GPU: tiny, 300 steps of 8 x 64 tokens on
// the 64-token corpus, as the CPU test. On the emulated device (about 30 minutes for that) the
// same architecture shrunk where it costs emulated time and proves nothing more: a 16-token
// vocabulary and 16 positions (tiny's width, depth, heads, GQA and MLP unchanged, so every
// kernel runs with the same block shapes), on a 16-token order-1 source, 80 steps of 8 x 16
// tokens. On the CPU this configuration ends 2.7-4.2% above the floor (seeds 1-5, bf16 and
// fp8); 40 or 60 steps ended up to 9.1% or 5.7% above it, so 80 leaves the margin
// (docs/cuda-without-gpu.md has the sweep, with higher learning rates and larger batches).
TrainConfig floor_run(const testing::TempDir& dir, nn::Precision precision, const char* device) {
#if defined(OCTET_CUDASIM)
  const std::string model = dir.file("tiny16.json");
  std::ofstream(model) << R"({"vocab_size": 16, "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 16})";
  TrainConfig c = tiny_run(model, precision, 80);
  c.data.markov_vocab = 16;
  c.data.train_tokens = 1 << 16;
  c.batch = 8;
  c.seq_len = 16;
  c.warmup = 5;
#else
  (void)dir;
  TrainConfig c = tiny_run("tiny", precision, 300);
#endif
  c.device = device;
  return c;
}

// The final validation loss of one floor run, and the corpus' entropy floor.
struct FloorResult {
  double val = 0, floor = 0;
};
FloorResult train_to_floor(const testing::TempDir& dir, nn::Precision precision,
                           const char* device) {
  const TrainConfig c = floor_run(dir, precision, device);
  Trainer trainer(c);
  const auto records = trainer.run();
  EXPECT_EQ(records.size(), static_cast<size_t>(c.steps)) << device;
  if (records.empty() || !records.back().val_loss.has_value()) {
    ADD_FAILURE() << device << " " << nn::precision_name(precision) << ": no validation loss";
    return {};
  }
  const FloorResult r{*records.back().val_loss, *trainer.loss_floor()};
  std::printf("[ result   ] %s %s val_loss %.4f (floor %.4f)\n", device,
              nn::precision_name(precision), r.val, r.floor);
  return r;
}

// The CPU tests' criteria (Training.Fp32ReachesTheEntropyFloor and
// Training.Bf16AndFp8ReachTheEntropyFloorAndFp8StaysOnBf16) for a run on the GPU: within 5%
// of the floor (the validation estimate over 8 batches, 8 x 512 tokens on a GPU, 8 x 128
// emulated, has a standard error of about 0.02 and 0.03 nats, inside the 5% = 0.06 nats
// margin), and within 1% of bf16, here the CPU's bf16 run of the same configuration (same
// seed, data and schedule; about 0.2 s emulated-size, seconds for tiny). One test per GPU
// precision, each with its own CPU reference, so that ctest runs the two long GPU trainings
// side by side (each is one process; emulated, one core each: 80 steps take about 6 minutes
// under ASan, which made the single two-run test the end of CI's emulated-device stage).
// Against the CPU bf16 run rather than the GPU one, both GPU runs are held to one reference,
// so GPU bf16 and GPU fp8 are within 2% of each other (the single test had 1%, same device).
void expect_floor_on_gpu(nn::Precision precision) {
  testing::TempDir dir;
  const FloorResult cpu = train_to_floor(dir, nn::Precision::bf16, "cpu");
  const FloorResult gpu = train_to_floor(dir, precision, "cuda");
  EXPECT_EQ(gpu.floor, cpu.floor);  // the same corpus
  EXPECT_LE(gpu.val, 1.05 * gpu.floor) << nn::precision_name(precision);
  EXPECT_LE(std::abs(gpu.val - cpu.val), 0.01 * cpu.val) << nn::precision_name(precision);
}

TEST(CudaTraining, Bf16ReachesTheEntropyFloorOnTheGpuAndStaysOnTheCpuRun) {
  OCTET_SKIP_WITHOUT(Device::cuda(0));
  expect_floor_on_gpu(nn::Precision::bf16);
}

TEST(CudaTraining, Fp8ReachesTheEntropyFloorOnTheGpuAndStaysOnBf16) {
  OCTET_SKIP_WITHOUT(Device::cuda(0));
  expect_floor_on_gpu(nn::Precision::fp8);
}

class TrainingOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(TrainingOnDevice, StepsAllocateNoDeviceMemory) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  for (nn::Precision precision : {nn::Precision::bf16, nn::Precision::fp8}) {
    TrainConfig c = tiny_run("tiny", precision, 6);
    if (device.is_cuda()) shrink_for_emulation(c);
    c.device = device_name(device);
    c.log_every = 2;
    Trainer trainer(c);
    trainer.train_step();  // the first step may fill caches (GEMM plans live on the host)
    const size_t in_use = device_bytes_in_use(device);
    reset_device_peak_bytes(device);
    for (int i = 0; i < 4; ++i) trainer.train_step();
    std::vector<StepRecord> last{trainer.train_step()};
    trainer.read_back(last);
    EXPECT_TRUE(std::isfinite(last[0].loss) && last[0].loss > 0) << last[0].loss;
    // Every device allocation is a Buffer, and Buffers count their bytes.
    EXPECT_EQ(device_bytes_in_use(device), in_use) << nn::precision_name(precision);
    EXPECT_EQ(device_peak_bytes(device), in_use) << nn::precision_name(precision);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainingOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet::train
