// tests/fp8/test_delayed_scaling.cpp: delayed scaling step by step against hand-worked amaxes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "fp8/quantized_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "kernels/scaling.h"
#include "testing.h"

namespace octet {
namespace {

using fp8::AmaxCompute;
using fp8::DelayedScaling;
using fp8::DelayedScalingState;

using testing::kInf;
using testing::kNaN;

// Equal values, or both NaN (the history keeps a NaN amax as it was written).
bool same(float a, float b) {
  return std::isnan(a) ? std::isnan(b) : a == b;
}

std::string str(const float* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

float read_float(const Tensor& t) {
  float v;
  copy_bytes(&v, Device::cpu(), t.data, t.device, 4);
  return v;
}

// What quantize does for each tensor (writes its amax into the history's current slot),
// then the update after the step.
void step(DelayedScalingState& s, Device device, const float* amaxes) {
  for (int slot = 0; slot < s.size(); ++slot) {
    copy_bytes(s.amax_slot(slot).data, device, &amaxes[slot], Device::cpu(), 4);
  }
  s.update();
}

// One step of a two-tensor state: the amaxes written, then the expected state after update().
struct Step {
  float amax[2];
  float history[2][4];  // the first history_len entries are used
  float scale[2];
  int nonfinite;  // the count so far
};

void check_sequence(Device device, const DelayedScaling& options, const Step* steps, int count) {
  DelayedScalingState s(device, options, {DType::e4m3, DType::e5m2});
  ASSERT_EQ(s.size(), 2);
  const int len = options.history_len;
  for (int t = 0; t < count; ++t) {
    step(s, device, steps[t].amax);
    const std::vector<float> history = s.history_host(), scales = s.scales_host();
    ASSERT_EQ(history.size(), 2u * len);
    for (int slot = 0; slot < 2; ++slot) {
      SCOPED_TRACE("step " + std::to_string(t + 1) + ", slot " + std::to_string(slot));
      bool history_ok = true;
      for (int j = 0; j < len; ++j) {
        history_ok = history_ok && same(history[slot * len + j], steps[t].history[slot][j]);
      }
      EXPECT_TRUE(history_ok) << "history " << str(&history[slot * len], len) << ", expected "
                              << str(steps[t].history[slot], len);
      // The scales are exact: fp8_max / amax correctly rounded, times 2^-margin.
      EXPECT_EQ(scales[slot], steps[t].scale[slot]);
      EXPECT_EQ(read_float(s.scale_inv(slot)), 1.0f / steps[t].scale[slot]);
      EXPECT_EQ(read_float(s.scale(slot)), steps[t].scale[slot]);
    }
    EXPECT_EQ(s.nonfinite_count(), steps[t].nonfinite) << "step " << t + 1;
  }
}

// History length 4, reduce = max. Slot 0 is E4M3 (fp8_max 448), slot 1 E5M2 (57344); both
// start from scale 1 and an all-zero history. Each update, worked by hand:
//   window = the row as quantize left it (slot 0 = this step's amax)
//   amax   = max(window), NaN winning;  scale = fp8_max / amax / 2^margin when amax is finite
//            and > 0, else the previous scale (a non-finite amax also counts once per update)
//   row    = (0, w[2], w[3], w[0]): roll(-1), then slot 0 cleared for the next amax
//
// slot 0 (E4M3)                                           margin 0     margin 1
//  t  amax  window              max   row after           scale        scale   nonfinite
//  1  14    14  0   0    0      14    0 0    0    14      448/14 = 32  16      0
//  2  2     2   0   0    14     14    0 0    14   2       32           16      0
//  3  3.5   3.5 0   14   2      14    0 14   2    3.5     32           16      0
//  4  7     7   14  2    3.5    14    0 2    3.5  7       32           16      0
//  5  1     1   2   3.5  7      7     0 3.5  7    1       448/7 = 64   32      0   14 has left
//  6  NaN   NaN 3.5 7    1      NaN   0 7    1    NaN     64 (kept)    32      1
//  7  0.5   0.5 7   1    NaN    NaN   0 1    NaN  0.5     64 (kept)    32      2   NaN stays in
//  8  5     5   1   NaN  0.5    NaN   0 NaN  0.5  5       64 (kept)    32      3   the window for
//  9  0.25  .25 NaN 0.5  5      NaN   0 0.5  5    0.25    64 (kept)    32      4   4 updates
// 10  0     0   0.5 5    0.25   5     0 5    0.25 0       448/5 = 89.6 44.8    4
// 11  2     2   5   0.25 0      5     0 0.25 0    2       89.6         44.8    4
//
// slot 1 (E5M2; the nonfinite counter above is the state's one counter, slot 1 adds nothing)
//  t  amax  window               max   row after           scale            margin 1
//  1  0     0    0    0    0     0     0 0    0    0       1 (kept: no amax yet)  1
//  2  7     7    0    0    0     7     0 0    0    7       57344/7 = 8192   4096
//  3  224   224  0    0    7     224   0 0    7    224     256              128
//  4  3.5   3.5  0    7    224   224   0 7    224  3.5     256              128
//  5  14    14   7    224  3.5   224   0 224  3.5  14      256              128
//  6  28    28   224  3.5  14    224   0 3.5  14   28      256              128   224 leaves now
//  7  1792  1792 3.5  14   28    1792  0 14   28   1792    32               16
//  8  0     0    14   28   1792  1792  0 28   1792 0       32               16
//  9  112   112  28   1792 0     1792  0 1792 0    112     32               16
// 10  56    56   1792 0    112   1792  0 0    112  56      32               16    1792 leaves now
// 11  7     7    0    112  56    112   0 112  56   7       57344/112 = 512  256
// (89.6 and 44.8 are the floats nearest to them; 448/5 rounds once, the halving is exact.)
constexpr Step kMaxMargin0[] = {
    {{14, 0}, {{0, 0, 0, 14}, {0, 0, 0, 0}}, {32, 1}, 0},
    {{2, 7}, {{0, 0, 14, 2}, {0, 0, 0, 7}}, {32, 8192}, 0},
    {{3.5f, 224}, {{0, 14, 2, 3.5f}, {0, 0, 7, 224}}, {32, 256}, 0},
    {{7, 3.5f}, {{0, 2, 3.5f, 7}, {0, 7, 224, 3.5f}}, {32, 256}, 0},
    {{1, 14}, {{0, 3.5f, 7, 1}, {0, 224, 3.5f, 14}}, {64, 256}, 0},
    {{kNaN, 28}, {{0, 7, 1, kNaN}, {0, 3.5f, 14, 28}}, {64, 256}, 1},
    {{0.5f, 1792}, {{0, 1, kNaN, 0.5f}, {0, 14, 28, 1792}}, {64, 32}, 2},
    {{5, 0}, {{0, kNaN, 0.5f, 5}, {0, 28, 1792, 0}}, {64, 32}, 3},
    {{0.25f, 112}, {{0, 0.5f, 5, 0.25f}, {0, 1792, 0, 112}}, {64, 32}, 4},
    {{0, 56}, {{0, 5, 0.25f, 0}, {0, 0, 112, 56}}, {89.6f, 32}, 4},
    {{2, 7}, {{0, 0.25f, 0, 2}, {0, 112, 56, 7}}, {89.6f, 512}, 4},
};
// The same amaxes with margin 1: the same histories, every computed scale halved, kept
// scales kept (slot 1's initial 1 stays 1).
constexpr float kMaxMargin1Scales[][2] = {{16, 1},   {16, 4096},  {16, 128},   {16, 128},
                                          {32, 128}, {32, 128},   {32, 16},    {32, 16},
                                          {32, 16},  {44.8f, 16}, {44.8f, 256}};

// History length 4, reduce = most-recent (window slot 0 only), margin 1:
//  t  slot 0 amax  scale                    slot 1 amax  scale                   nonfinite
//  1  14           448/14/2 = 16            7            57344/7/2 = 4096        0
//  2  2            448/2/2 = 112            Inf          4096 (kept)             1
//  3  0            112 (kept; the window's  28           57344/28/2 = 1024       1
//                  14 and 2 do not count)
//  4  NaN          112 (kept)               0.875        57344/0.875/2 = 32768   2
//  5  5            448/5/2 = 44.8 (the NaN  3.5          57344/3.5/2 = 8192      2
//                  in the window is ignored)
// The rows roll as under max: (0, w[2], w[3], w[0]).
constexpr Step kMostRecentMargin1[] = {
    {{14, 7}, {{0, 0, 0, 14}, {0, 0, 0, 7}}, {16, 4096}, 0},
    {{2, kInf}, {{0, 0, 14, 2}, {0, 0, 7, kInf}}, {112, 4096}, 1},
    {{0, 28}, {{0, 14, 2, 0}, {0, 7, kInf, 28}}, {112, 1024}, 1},
    {{kNaN, 0.875f}, {{0, 2, 0, kNaN}, {0, kInf, 28, 0.875f}}, {112, 32768}, 2},
    {{5, 3.5f}, {{0, 0, kNaN, 5}, {0, 28, 0.875f, 3.5f}}, {44.8f, 8192}, 2},
};

// History length 1, max, margin 0: the window is this step's amax alone; the row is 0 after
// every update.
//  t  slot 0 amax  scale          slot 1 amax  scale                 nonfinite
//  1  14           32             Inf          1 (kept, initial)     1
//  2  0            32 (kept)      7            8192                  1
//  3  NaN          32 (kept)      0            8192 (kept)           2
//  4  2            224            1792         32                    2
constexpr Step kLength1[] = {
    {{14, kInf}, {{0}, {0}}, {32, 1}, 1},
    {{0, 7}, {{0}, {0}}, {32, 8192}, 1},
    {{kNaN, 0}, {{0}, {0}}, {32, 8192}, 2},
    {{2, 1792}, {{0}, {0}}, {224, 32}, 2},
};

class DelayedScalingOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(DelayedScalingOnDevice, MaxOverAWindowOfFourFollowsTheHandWorkedSequence) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  check_sequence(device, {4, AmaxCompute::max, 0}, kMaxMargin0, std::size(kMaxMargin0));
}

TEST_P(DelayedScalingOnDevice, MarginOneHalvesEveryComputedScale) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  Step steps[std::size(kMaxMargin0)];
  for (size_t t = 0; t < std::size(steps); ++t) {
    steps[t] = kMaxMargin0[t];
    steps[t].scale[0] = kMaxMargin1Scales[t][0];
    steps[t].scale[1] = kMaxMargin1Scales[t][1];
  }
  check_sequence(device, {4, AmaxCompute::max, 1}, steps, std::size(steps));
}

TEST_P(DelayedScalingOnDevice, MostRecentUsesOnlyThisStepsAmax) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  check_sequence(device, {4, AmaxCompute::most_recent, 1}, kMostRecentMargin1,
                 std::size(kMostRecentMargin1));
}

TEST_P(DelayedScalingOnDevice, HistoryOfLengthOneIsCurrentAmaxDelayedByOneStep) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  check_sequence(device, {1, AmaxCompute::max, 0}, kLength1, std::size(kLength1));
  // With one slot, max and most-recent are the same reduction.
  check_sequence(device, {1, AmaxCompute::most_recent, 0}, kLength1, std::size(kLength1));
}

TEST_P(DelayedScalingOnDevice, RestoreRoundTripsAndTheRestoredStateContinuesIdentically) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const DelayedScaling options{5, AmaxCompute::max, 0};
  const std::vector<DType> formats{DType::e4m3, DType::e5m2, DType::e4m3};
  DelayedScalingState a(device, options, formats);
  std::uniform_real_distribution<float> amax(0.01f, 1000.0f);
  auto random_step = [&](std::vector<DelayedScalingState*> states) {
    const float values[3] = {amax(rng), amax(rng), amax(rng)};
    for (DelayedScalingState* s : states) step(*s, device, values);
  };
  for (int t = 0; t < 7; ++t) random_step({&a});  // the window has rolled over

  DelayedScalingState b(device, options, formats);
  b.restore(a.scales_host(), a.history_host());
  EXPECT_EQ(b.scales_host(), a.scales_host());
  EXPECT_EQ(b.history_host(), a.history_host());
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(read_float(b.scale_inv(slot)), read_float(a.scale_inv(slot))) << slot;
  }
  for (int t = 0; t < 6; ++t) {
    random_step({&a, &b});
    ASSERT_EQ(b.scales_host(), a.scales_host()) << "step " << t;
    ASSERT_EQ(b.history_host(), a.history_host()) << "step " << t;
  }
  try {
    b.restore({1.0f, 2.0f}, a.history_host());
    ADD_FAILURE() << "restore took 2 scales for 3 tensors";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[delayed scaling] expected 3 scales and 15 history "
              "values, got 2 and 15");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DelayedScalingOnDevice,
                         ::testing::ValuesIn(testing::all_devices()), testing::device_param_name);

void expect_error(const std::function<void()>& fn, const std::string& prefix,
                  const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected octet::Error containing '" << part << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(DelayedScalingState, RefusesAnEmptyHistoryAndNonFp8Formats) {
  expect_error(
      [] {
        DelayedScalingState(Device::cpu(), {0, AmaxCompute::max, 0}, {DType::e4m3});
      },
      "[delayed scaling] ", "history_len must be >= 1, got 0");
  expect_error(
      [] {
        DelayedScalingState(Device::cpu(), {4, AmaxCompute::max, 0}, {DType::bf16});
      },
      "[delayed scaling] ", "tensor formats must be e4m3 or e5m2, got bf16");
  DelayedScalingState s(Device::cpu(), {4, AmaxCompute::max, 0}, {DType::e4m3});
  expect_error([&] { s.scale(1); }, "[delayed scaling] ", "slot 1 out of 1");
  expect_error([&] { s.amax_slot(-1); }, "[delayed scaling] ", "slot -1 out of 1");
}

// The kernel itself, on tensors the test lays out: any fp8_max, and no nonfinite counter.
TEST(DelayedScalingKernel, UpdatesEveryRowWithItsOwnFp8MaxAndCountsOnlyWhenAsked) {
  // 3 tensors, history length 2, max, margin 2; fp8_max 100, 448, 57344:
  //  row  history before  max  roll (0, w[0])  scale                    scale before
  //  0    [5, 20]         20   [0, 5]          100/20/4 = 1.25          1
  //  1    [NaN, 1]        NaN  [0, NaN]        7 (kept)                 7
  //  2    [0, 0]          0    [0, 0]          3 (kept)                 3
  // (with length 2 the roll keeps w[0] in the last slot: (w[1], w[0]), then slot 0 = 0)
  float history[6] = {5, 20, kNaN, 1, 0, 0};
  // The state keeps scale_inv = 1 / scale; kept scales keep their scale_inv.
  float scale[3] = {1, 7, 3}, scale_inv[3] = {1, 1.0f / 7.0f, 1.0f / 3.0f};
  float fp8_max[3] = {100, 448, 57344};
  int32_t nonfinite = 0;
  const Tensor th(history, DType::f32, {3, 2}), ts(scale, DType::f32, {3}),
      tsi(scale_inv, DType::f32, {3}), tm(fp8_max, DType::f32, {3}),
      tn(&nonfinite, DType::i32, {1});
  kernels::delayed_scaling_update(th, ts, tsi, tm, Tensor{}, kernels::AmaxReduce::max, 2);
  const float want_history[6] = {0, 5, 0, kNaN, 0, 0};
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(same(history[i], want_history[i])) << i;
  EXPECT_EQ(scale[0], 1.25f);
  EXPECT_EQ(scale[1], 7.0f);
  EXPECT_EQ(scale[2], 3.0f);
  // scale_inv = 1 / scale for every row.
  EXPECT_EQ(scale_inv[0], 0.8f);
  EXPECT_EQ(scale_inv[1], 1.0f / 7.0f);
  EXPECT_EQ(scale_inv[2], 1.0f / 3.0f);
  // Now with the counter: the NaN is still in row 1's window ([NaN, NaN] after writing NaN
  // at slot 0 again), row 0 gets [4, 5] -> 100/5/4 = 5.
  history[0] = 4;
  history[2] = kNaN;
  kernels::delayed_scaling_update(th, ts, tsi, tm, tn, kernels::AmaxReduce::max, 2);
  EXPECT_EQ(scale[0], 5.0f);
  EXPECT_EQ(scale[1], 7.0f);
  EXPECT_EQ(nonfinite, 1);

  const std::string op = "[delayed_scaling_update] ";
  float two[2] = {1, 1};
  const Tensor short_scale(two, DType::f32, {2});
  expect_error([&] { kernels::delayed_scaling_update(th, short_scale, tsi, tm, tn, {}, 0); }, op,
               "scale, scale_inv and fp8_max must be f32 [3]");
  expect_error([&] { kernels::delayed_scaling_update(th.reshaped({6}), ts, tsi, tm, tn, {}, 0); },
               op, "history must be f32 [N, len >= 1]");
  expect_error([&] { kernels::delayed_scaling_update(th, ts, tsi, tm, tsi, {}, 0); }, op,
               "nonfinite must be i32 [1]");
  expect_error([&] { kernels::delayed_scaling_update(th, ts, tsi, tm, tn, {}, 100); }, op,
               "margin 100 is out of range");
}

// ---- quantize under tensor-delayed scaling ----

class DelayedQuantizeOnDevice : public ::testing::TestWithParam<Device> {};

struct HostQuantized {
  std::vector<uint8_t> data;
  float scale_inv, amax;
  int32_t counts[2];
};

HostQuantized read_back(const fp8::QuantizedTensor& q) {
  HostQuantized h;
  h.data.resize(q.data.nbytes());
  copy_bytes(h.data.data(), Device::cpu(), q.data.data, q.data.device, h.data.size());
  h.scale_inv = read_float(q.scale_inv);
  h.amax = read_float(q.amax);
  copy_bytes(h.counts, Device::cpu(), q.counts.data, q.counts.device, sizeof h.counts);
  return h;
}

TEST_P(DelayedQuantizeOnDevice, QuantizeUsesTheStatesScaleAndRecordsItsAmaxInTheHistory) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const fp8::Recipe recipe = fp8::Recipe::parse("tensor-delayed");
  ASSERT_EQ(recipe.grid(fp8::Role::activation), (kernels::ScaleGrid{0, 0, false}));
  DelayedScalingState state(device, {4, AmaxCompute::max, 0}, {DType::e4m3, DType::e4m3});
  // Slot 0 quantizes with scale 2 (as if set by earlier steps); slot 1 is another tensor
  // whose history must stay untouched.
  state.restore({2.0f, 3.0f}, {0, 0, 0, 0, 0, 5, 6, 7});

  const int64_t rows = 6, cols = 48;
  std::uniform_real_distribution<float> uniform(-200.0f, 200.0f);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = uniform(rng);
  // Two values beyond 448 / 2 = 224: they saturate under the stale scale (2 * 300 = 600 and
  // 2 * 250 = 500 both lie above 464, the midpoint between 448 and the next binade step).
  x[5] = -300.0f;
  x[100] = 250.0f;
  Buffer x_buf(device, x.size() * 4);
  copy_bytes(x_buf.data(), device, x.data(), Device::cpu(), x.size() * 4);
  const Tensor tx = x_buf.view(DType::f32, {rows, cols});

  fp8::QuantizedTensor q(device, rows, cols, recipe, fp8::Role::activation, false);
  fp8::quantize(tx, q, recipe, &state, 0);
  HostQuantized h = read_back(q);
  EXPECT_EQ(h.scale_inv, 0.5f);
  EXPECT_EQ(h.amax, 300.0f);
  EXPECT_EQ(h.counts[0], 2) << "saturated";
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) mismatches += h.data[i] != f32_to_e4m3(x[i] * 2.0f);
  EXPECT_EQ(mismatches, 0u) << "codes differ from e4m3(x * 2)";
  // The amax went into slot 0's current history entry; nothing else moved.
  std::vector<float> history = state.history_host();
  EXPECT_EQ(history, (std::vector<float>{300, 0, 0, 0, 0, 5, 6, 7}));
  EXPECT_EQ(state.scales_host(), (std::vector<float>{2.0f, 3.0f}));

  // After the step: slot 0's scale from the recorded amax, slot 1's from its window.
  state.update();
  EXPECT_EQ(state.scales_host(), (std::vector<float>{448.0f / 300.0f, 448.0f / 7.0f}));
  EXPECT_EQ(state.history_host(), (std::vector<float>{0, 0, 0, 300, 0, 6, 7, 0}));

  // The next quantization uses the new scale.
  for (float& v : x) v = uniform(rng) * 0.25f;
  copy_bytes(x_buf.data(), device, x.data(), Device::cpu(), x.size() * 4);
  fp8::quantize(tx, q, recipe, &state, 0);
  h = read_back(q);
  const float scale = 448.0f / 300.0f;
  EXPECT_EQ(h.scale_inv, 1.0f / scale);
  EXPECT_EQ(h.counts[0], 0);
  mismatches = 0;
  float amax = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    mismatches += h.data[i] != f32_to_e4m3(x[i] * scale);
    amax = std::max(amax, std::fabs(x[i]));
  }
  EXPECT_EQ(mismatches, 0u) << "codes differ from e4m3(x * 448/300)";
  EXPECT_EQ(h.amax, amax);
  EXPECT_EQ(state.history_host()[0], amax);

  expect_error([&] { fp8::quantize(tx, q, recipe); }, "[quantize] ",
               "tensor-delayed scaling needs the tensor's delayed-scaling state and slot");
  expect_error([&] { fp8::quantize(tx, q, recipe, &state, 2); }, "[quantize] ",
               "tensor-delayed scaling needs");
}

INSTANTIATE_TEST_SUITE_P(Devices, DelayedQuantizeOnDevice,
                         ::testing::ValuesIn(testing::all_devices()), testing::device_param_name);

}  // namespace
}  // namespace octet
