// tests/kernels/test_embedding.cpp: kernels::embedding_forward/backward against float64
// references and finite differences on fresh random inputs, and their errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/embedding.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;

constexpr int64_t kBatch = 2, kSeq = 9, kTokens = kBatch * kSeq;

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
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 37, dim = 24;
  for (DType table_dtype : {DType::f32, DType::bf16}) {
    for (DType out_dtype : {DType::f32, DType::bf16}) {
      std::vector<double> table = testing::uniform(vocab * dim, -2, 2, rng);
      const auto t = testing::upload(device, table_dtype, {vocab, dim}, table);
      const std::vector<int32_t> ids = random_ids(kTokens, vocab, rng);
      const auto i = testing::upload_ids(device, ids);
      const auto out = testing::upload(device, out_dtype, {kBatch, kSeq, dim},
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

TEST_P(EmbeddingOnDevice, BackwardAccumulatesRepeatedIdsInFp32) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
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

TEST_P(EmbeddingOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
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

TEST(EmbeddingErrors, IdsOutOfRangeShapesAndCudaAreRefused) {
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
  // A CUDA tensor (never dereferenced: the dispatcher refuses it first).
  auto on_cuda = [](Tensor t) { return t.device = Device::cuda(0), t; };
  testing::expect_op_error(
      [&] {
        kernels::embedding_forward(on_cuda(good.tensor), on_cuda(table.tensor),
                                   on_cuda(out.tensor));
      },
      "embedding_forward", "has no CUDA implementation yet");
  testing::expect_op_error(
      [&] {
        kernels::embedding_backward(on_cuda(good.tensor), on_cuda(out.tensor),
                                    on_cuda(dtable.tensor));
      },
      "embedding_backward", "has no CUDA implementation yet");
}

}  // namespace
}  // namespace octet
