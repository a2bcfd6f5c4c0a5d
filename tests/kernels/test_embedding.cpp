// tests/kernels/test_embedding.cpp: kernels::embedding_forward/backward against float64
// references and finite differences on fresh random inputs, and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/embedding.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;

constexpr int64_t kIdBatch = 2, kSeq = 9, kTokens = kIdBatch * kSeq;

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, testing::Rng& rng) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  ids[0] = 0;  // both ends of the table
  ids[n - 1] = static_cast<int32_t>(vocab - 1);
  return ids;
}

class EmbeddingOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(EmbeddingOnDevice, ForwardCopiesRowsRoundedOnceToTheOutputDType) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 37, dim = 24;
  for (DType table_dtype : {DType::f32, DType::bf16}) {
    for (DType out_dtype : {DType::f32, DType::bf16}) {
      std::vector<double> table = testing::uniform(vocab * dim, -2, 2, rng);
      const auto t = testing::upload(device, table_dtype, {vocab, dim}, table);
      const std::vector<int32_t> ids = random_ids(kTokens, vocab, rng);
      const auto i = testing::upload_ids(device, ids);
      const auto out = testing::upload(device, out_dtype, {kIdBatch, kSeq, dim},
                                       std::vector<double>(kTokens * dim, -99.0));
      kernels::embedding_forward(i.tensor, t.tensor, out.tensor);
      // Tolerance: a copy is exact; an f32 -> bf16 output rounds once (2^-8 relative).
      std::vector<Approx> want;
      for (int32_t id : ids) {
        for (int64_t j = 0; j < dim; ++j) {
          want.push_back(testing::round_to(out_dtype, testing::exact(table[id * dim + j])));
        }
      }
      testing::expect_within(testing::download(out.tensor), want,
                             std::string(dtype_name(table_dtype)) + "->" + dtype_name(out_dtype));
    }
  }
}

// Forward on `device` against float64 and, off the CPU, bit for bit against the CPU kernel
// (a copy, rounded once to the output dtype on both devices).
void expect_forward_matches(Device device, int64_t tokens, int64_t vocab, int64_t dim,
                            bool misaligned, testing::Rng& rng) {
  for (DType table_dtype : {DType::f32, DType::bf16}) {
    for (DType out_dtype : {DType::f32, DType::bf16}) {
      const std::string what = std::string(dtype_name(table_dtype)) + "->" + dtype_name(out_dtype) +
                               " T=" + std::to_string(tokens) + " D=" + std::to_string(dim) +
                               (misaligned ? " misaligned" : "");
      std::vector<double> table = testing::uniform(vocab * dim, -2, 2, rng);
      const auto t = misaligned
                         ? testing::upload_misaligned(device, table_dtype, {vocab, dim}, table)
                         : testing::upload(device, table_dtype, {vocab, dim}, table);
      const std::vector<int32_t> ids = random_ids(tokens, vocab, rng);
      const auto i = testing::upload_ids(device, ids);
      const auto out = testing::upload(device, out_dtype, {tokens, dim},
                                       std::vector<double>(tokens * dim, -99.0));
      kernels::embedding_forward(i.tensor, t.tensor, out.tensor);
      // Tolerance: a copy is exact; an f32 -> bf16 output rounds once (2^-8 relative).
      std::vector<Approx> want;
      for (int32_t id : ids) {
        for (int64_t j = 0; j < dim; ++j) {
          want.push_back(testing::round_to(out_dtype, testing::exact(table[id * dim + j])));
        }
      }
      const std::vector<double> got = testing::download(out.tensor);
      testing::expect_within(got, want, what);
      if (device.is_cpu()) continue;
      const auto tc = testing::upload(Device::cpu(), table_dtype, {vocab, dim}, table);
      const auto ic = testing::upload_ids(Device::cpu(), ids);
      const auto oc = testing::upload(Device::cpu(), out_dtype, {tokens, dim},
                                      std::vector<double>(tokens * dim));
      kernels::embedding_forward(ic.tensor, tc.tensor, oc.tensor);
      EXPECT_EQ(got, testing::download(oc.tensor)) << what << ": the CPU kernel's bits";
    }
  }
}

// Rows of 16-byte groups over many blocks (D = 4096: a block's threads take two groups
// each), rows with idle threads (D = 1000), the element-wise path (D = 1001, or a table off
// a 16-byte boundary) and tiny rows stacked several to a block (D = 3).
TEST_P(EmbeddingOnDevice, ForwardMatchesOnWideOddAndMisalignedRows) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  expect_forward_matches(device, 300, 50, 4096, false, rng);
  expect_forward_matches(device, 500, 301, 1000, false, rng);
  expect_forward_matches(device, 77, 13, 1001, false, rng);
  expect_forward_matches(device, 64, 20, 1000, true, rng);
  expect_forward_matches(device, 1000, 9, 3, false, rng);
}

TEST_P(EmbeddingOnDevice, BackwardAccumulatesRepeatedIdsInFp32) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 5, dim = 70;  // few ids: every row gets several tokens
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<double> dout = testing::uniform(kTokens * dim, -1, 1, rng);
    const auto g = testing::upload(device, dtype, {kTokens, dim}, dout);
    std::vector<double> dtable = testing::uniform(vocab * dim, -1, 1, rng);
    const auto dt = testing::upload(device, DType::f32, {vocab, dim}, dtable);
    const std::vector<int32_t> ids = random_ids(kTokens, vocab, rng);
    const auto i = testing::upload_ids(device, ids);
    kernels::embedding_backward(i.tensor, g.tensor, dt.tensor);
    // Tolerance: dtable[v, j] + the n tokens' dout in fp32 (any order): gamma_n times
    // the sum of magnitudes (Approx sum).
    std::vector<Approx> want;
    for (int64_t v = 0; v < vocab; ++v) {
      for (int64_t j = 0; j < dim; ++j) {
        std::vector<Approx> terms{testing::exact(dtable[v * dim + j])};
        for (int64_t t = 0; t < kTokens; ++t) {
          if (ids[t] == v) terms.push_back(testing::exact(dout[t * dim + j]));
        }
        want.push_back(testing::sum(terms));
      }
    }
    testing::expect_within(testing::download(dt.tensor), want, dtype_name(dtype));
  }
}

// Backward on `device` against float64 and, off the CPU, bit for bit against the CPU
// kernel: both add each row's tokens in increasing t onto dtable, one fp32 addition each.
void expect_backward_matches(Device device, DType dtype, int64_t vocab, int64_t dim,
                             const std::vector<int32_t>& ids, testing::Rng& rng) {
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const std::string what = std::string(dtype_name(dtype)) + " T=" + std::to_string(tokens) +
                           " V=" + std::to_string(vocab) + " D=" + std::to_string(dim);
  std::vector<double> dout = testing::uniform(tokens * dim, -1, 1, rng);
  const auto g = testing::upload(device, dtype, {tokens, dim}, dout);
  std::vector<double> dtable = testing::uniform(vocab * dim, -1, 1, rng);
  const auto dt = testing::upload(device, DType::f32, {vocab, dim}, dtable);
  const auto i = testing::upload_ids(device, ids);
  kernels::embedding_backward(i.tensor, g.tensor, dt.tensor);
  // Tolerance: dtable[v, j] + the n tokens' dout in fp32: gamma_n times the sum of
  // magnitudes (Approx sum).
  std::vector<std::vector<int64_t>> tokens_of(vocab);
  for (int64_t t = 0; t < tokens; ++t) tokens_of[ids[t]].push_back(t);
  std::vector<Approx> want;
  for (int64_t v = 0; v < vocab; ++v) {
    for (int64_t j = 0; j < dim; ++j) {
      std::vector<Approx> terms{testing::exact(dtable[v * dim + j])};
      for (int64_t t : tokens_of[v]) terms.push_back(testing::exact(dout[t * dim + j]));
      want.push_back(testing::sum(terms));
    }
  }
  const std::vector<double> got = testing::download(dt.tensor);
  testing::expect_within(got, want, what);
  if (device.is_cpu()) return;
  const auto gc = testing::upload(Device::cpu(), dtype, {tokens, dim}, dout);
  const auto dc = testing::upload(Device::cpu(), DType::f32, {vocab, dim}, dtable);
  const auto ic = testing::upload_ids(Device::cpu(), ids);
  kernels::embedding_backward(ic.tensor, gc.tensor, dc.tensor);
  EXPECT_EQ(got, testing::download(dc.tensor)) << what << ": the CPU kernel's bits";
}

// Long runs of repeated ids (an id with more tokens than the CUDA kernel sorts in shared
// memory, 2048, takes its scan path over several 1024-id steps), ids first seen late (the
// second half of the batch draws from the whole vocabulary, the first half from its lower
// half), rows wider than one 4096-column block slice with a tail (D = 4100), and odd widths.
TEST_P(EmbeddingOnDevice, BackwardMatchesOnLongRunsOfRepeatedIdsAndWideRows) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  auto ids_of = [&](int64_t tokens, int64_t vocab) {
    std::vector<int32_t> ids(tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      ids[t] = static_cast<int32_t>(rng() % (t < tokens / 2 ? vocab / 2 : vocab));
    }
    return ids;
  };
  expect_backward_matches(device, DType::f32, 80, 4100, ids_of(2100, 80), rng);
  expect_backward_matches(device, DType::bf16, 7, 1000, ids_of(2500, 7), rng);
  expect_backward_matches(device, DType::bf16, 300, 1001, ids_of(1200, 300), rng);
  expect_backward_matches(device, DType::f32, 1000, 8, {999, 3, 999}, rng);
  // id 0: about 3000 of 4500 tokens (the scan path); ids 1, 2: about 750 each (sorted).
  expect_backward_matches(device, DType::f32, 3, 40, ids_of(4500, 3), rng);
}

// The CPU refuses ids outside [0, V) before it touches anything (see the errors below);
// a CUDA kernel cannot throw, so it poisons the token's output row with NaN, drops its
// gradient, and never touches memory outside the table.
TEST_P(EmbeddingOnDevice, OutOfRangeIdsAreRefusedOnTheCpuAndPoisonedOnCuda) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const int64_t vocab = 7, dim = 12, tokens = 4;
  std::vector<double> table(vocab * dim), dout(tokens * dim), dtable(vocab * dim);
  for (size_t k = 0; k < table.size(); ++k) table[k] = 0.25 * static_cast<double>(k);
  for (size_t k = 0; k < dout.size(); ++k) dout[k] = 1.0 + static_cast<double>(k);
  const auto t = testing::upload(device, DType::f32, {vocab, dim}, table);
  const auto g = testing::upload(device, DType::f32, {tokens, dim}, dout);
  const auto dt = testing::upload(device, DType::f32, {vocab, dim}, dtable);
  const auto out =
      testing::upload(device, DType::f32, {tokens, dim}, std::vector<double>(tokens * dim, -99.0));
  const auto i = testing::upload_ids(device, {1, 7, 2, -3});
  if (device.is_cpu()) {
    testing::expect_op_error([&] { kernels::embedding_forward(i.tensor, t.tensor, out.tensor); },
                             "embedding_forward", "ids[1] = 7 is outside");
    testing::expect_op_error([&] { kernels::embedding_backward(i.tensor, g.tensor, dt.tensor); },
                             "embedding_backward", "ids[1] = 7 is outside");
    return;
  }
  kernels::embedding_forward(i.tensor, t.tensor, out.tensor);
  const std::vector<double> o = testing::download(out.tensor);
  for (int64_t j = 0; j < dim; ++j) {
    EXPECT_EQ(o[0 * dim + j], table[1 * dim + j]) << "token 0, column " << j;
    EXPECT_TRUE(std::isnan(o[1 * dim + j])) << "token 1 (id 7), column " << j;
    EXPECT_EQ(o[2 * dim + j], table[2 * dim + j]) << "token 2, column " << j;
    EXPECT_TRUE(std::isnan(o[3 * dim + j])) << "token 3 (id -3), column " << j;
  }
  kernels::embedding_backward(i.tensor, g.tensor, dt.tensor);
  // dtable was 0: rows 1 and 2 receive tokens 0 and 2 exactly, every other row stays 0.
  std::vector<double> want(vocab * dim, 0.0);
  for (int64_t j = 0; j < dim; ++j) {
    want[1 * dim + j] = dout[0 * dim + j];
    want[2 * dim + j] = dout[2 * dim + j];
  }
  EXPECT_EQ(testing::download(dt.tensor), want);
}

TEST_P(EmbeddingOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 11, dim = 6;
  const std::vector<int32_t> ids = random_ids(kTokens, vocab, rng);
  const auto i = testing::upload_ids(device, ids);
  std::vector<double> table = testing::uniform(vocab * dim, -1, 1, rng);
  std::vector<double> r = testing::uniform(kTokens * dim, -1, 1, rng);
  const auto rt = testing::upload(device, DType::f32, {kTokens, dim}, r);
  const auto out =
      testing::upload(device, DType::f32, {kTokens, dim}, std::vector<double>(kTokens * dim, 0.0));
  auto forward = [&](const std::vector<double>& x) {
    const auto t = testing::upload(device, DType::f32, {vocab, dim}, x);
    kernels::embedding_forward(i.tensor, t.tensor, out.tensor);
    return testing::download(out.tensor);
  };
  testing::round_in_place(DType::f32, table);
  const auto dt =
      testing::upload(device, DType::f32, {vocab, dim}, std::vector<double>(vocab * dim, 0.0));
  kernels::embedding_backward(i.tensor, rt.tensor, dt.tensor);
  // The forward is a copy (exact, out_bound 0) and linear (no truncation): finite
  // differences are exact up to the float64 sums, and the gradient is a sum of up to
  // T f32 terms: gamma_T sum |r| bounds it.
  std::vector<double> grad_bound(vocab * dim, testing::gamma(kTokens) * kTokens);
  testing::expect_gradient_matches_finite_differences(
      table, forward, r, std::vector<double>(kTokens * dim, 0.0), testing::download(dt.tensor),
      grad_bound, 0x1p-6, "embedding");
}

INSTANTIATE_TEST_SUITE_P(Devices, EmbeddingOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(EmbeddingErrors, IdsOutOfRangeShapesAndAbsentDevicesAreRefused) {
  const Device cpu = Device::cpu();
  const auto table = testing::upload(cpu, DType::f32, {7, 4}, std::vector<double>(28, 1.0));
  const auto out = testing::upload(cpu, DType::f32, {3, 4}, std::vector<double>(12, 0.0));
  const auto dtable = testing::upload(cpu, DType::f32, {7, 4}, std::vector<double>(28, 0.0));
  const auto bad_high = testing::upload_ids(cpu, {1, 7, 2});
  const auto bad_low = testing::upload_ids(cpu, {1, 2, -3});
  const auto good = testing::upload_ids(cpu, {1, 2, 3});
  testing::expect_op_error(
      [&] { kernels::embedding_forward(bad_high.tensor, table.tensor, out.tensor); },
      "embedding_forward", "ids[1] = 7 is outside the vocabulary [0, V=7)");
  testing::expect_op_error(
      [&] { kernels::embedding_backward(bad_low.tensor, out.tensor, dtable.tensor); },
      "embedding_backward", "ids[2] = -3 is outside the vocabulary [0, V=7)");
  const auto out_wide = testing::upload(cpu, DType::f32, {3, 5}, std::vector<double>(15, 0.0));
  testing::expect_op_error(
      [&] { kernels::embedding_forward(good.tensor, table.tensor, out_wide.tensor); },
      "embedding_forward", "out must be f32 or bf16 [3, 4]");
  const auto dtable_bf16 = testing::upload(cpu, DType::bf16, {7, 4}, std::vector<double>(28, 0.0));
  testing::expect_op_error(
      [&] { kernels::embedding_backward(good.tensor, out.tensor, dtable_bf16.tensor); },
      "embedding_backward", "dtable must be f32");
  testing::expect_op_error(
      [&] { kernels::embedding_forward(table.tensor, table.tensor, out.tensor); },
      "embedding_forward", "ids must be i32");
  // A device this machine lacks (never dereferenced: the dispatcher refuses it first).
  auto on_cuda = [](Tensor t) { return t.device = testing::absent_cuda_device(), t; };
  testing::expect_op_error(
      [&] {
        kernels::embedding_forward(on_cuda(good.tensor), on_cuda(table.tensor),
                                   on_cuda(out.tensor));
      },
      "embedding_forward", "CUDA device");
  testing::expect_op_error(
      [&] {
        kernels::embedding_backward(on_cuda(good.tensor), on_cuda(out.tensor),
                                    on_cuda(dtable.tensor));
      },
      "embedding_backward", "CUDA device");
}

}  // namespace
}  // namespace octet
