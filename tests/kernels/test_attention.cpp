// tests/kernels/test_attention.cpp: kernels::attention_forward/backward (causal, MHA
// and GQA) against a float64 reference that materialises the full score matrix, with
// derived bounds, against finite differences, across thread counts, and their errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

constexpr int64_t kBatch = 2;

struct AttnCase {
  int64_t n_heads, n_kv_heads, head_dim, seq_len;
  int64_t tokens() const { return kBatch * seq_len; }
  int64_t width() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  int64_t out_width() const { return n_heads * head_dim; }
  std::string name() const {
    return "Hq=" + std::to_string(n_heads) + " Hkv=" + std::to_string(n_kv_heads) +
           " hd=" + std::to_string(head_dim) + " S=" + std::to_string(seq_len);
  }
};
// GQA and MHA at small odd lengths; S=37 spans two 32-key blocks of the backward pass.
const AttnCase kCases[] = {{4, 2, 8, 9}, {4, 4, 16, 7}, {4, 2, 16, 37}};

// The kernel's formulas in float64, step by step, each value with the running error
// bound of its fp32 evaluation (testing::Approx): these bounds are the tolerances.
//   s_ij = (q_i . k_j) * fl(1/sqrt(hd)); m_i = max_j s_ij (the computed max errs by at
//   most max_j bound(s_ij)); p_ij = exp(s_ij - m_i); l_i = sum_j p_ij;
//   out_i = (sum_j p_ij v_j) / l_i; lse_i = m_i + log(l_i);
//   D_i = dout_i . out_i (out as stored); P_ij = exp(s_ij - lse_i); dS_ij = P_ij (dout_i . v_j -
//   D_i); dq_i = (sum_j dS_ij k_j) * scale; dk_j = (sum_{h, i} dS_ij q_i) * scale; dv_j = sum_{h,
//   i} P_ij dout_i.
// bf16 results add 2^-8 relative (round_to).
struct AttnReference {
  std::vector<Approx> out, lse, dqkv;
};

AttnReference reference(const AttnCase& c, const std::vector<double>& qkv,
                        const std::vector<double>& dout, DType dtype) {
  const int64_t S = c.seq_len, hd = c.head_dim, H = c.n_heads, W = c.width(), OW = c.out_width();
  const int64_t group = c.n_heads / c.n_kv_heads;
  const Approx scale = exact(1.0) / testing::sqrt(exact(static_cast<double>(hd)));
  auto q_at = [&](int64_t b, int64_t i, int64_t h) { return (b * S + i) * W + h * hd; };
  auto k_at = [&](int64_t b, int64_t j, int64_t g) { return q_at(b, j, H + g); };
  auto v_at = [&](int64_t b, int64_t j, int64_t g) { return q_at(b, j, H + c.n_kv_heads + g); };
  auto o_at = [&](int64_t b, int64_t i, int64_t h) { return (b * S + i) * OW + h * hd; };
  auto dot = [&](const std::vector<double>& a, int64_t ia, const std::vector<Approx>& b,
                 int64_t ib) {
    std::vector<Approx> terms;
    for (int64_t d = 0; d < hd; ++d) terms.push_back(exact(a[ia + d]) * b[ib + d]);
    return testing::sum(terms);
  };
  std::vector<Approx> x;
  for (double v : qkv) x.push_back(exact(v));

  AttnReference ref{std::vector<Approx>(c.tokens() * OW), std::vector<Approx>(kBatch * H * S),
                    std::vector<Approx>(c.tokens() * W, exact(0.0))};
  std::vector<std::vector<Approx>> dk_terms(c.tokens() * W), dv_terms(c.tokens() * W);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      std::vector<std::vector<Approx>> s(S);  // the full (causal) score matrix
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j <= i; ++j)
          s[i].push_back(dot(qkv, q_at(b, i, h), x, k_at(b, j, g)) * scale);
      }
      for (int64_t i = 0; i < S; ++i) {
        Approx m{-INFINITY, 0.0};
        for (const Approx& sij : s[i]) m.v = std::max(m.v, sij.v), m.e = std::max(m.e, sij.e);
        std::vector<Approx> p;
        for (const Approx& sij : s[i]) p.push_back(testing::exp(sij - m));
        const Approx l = testing::sum(p);
        for (int64_t d = 0; d < hd; ++d) {
          std::vector<Approx> terms;
          for (int64_t j = 0; j <= i; ++j) terms.push_back(p[j] * x[v_at(b, j, g) + d]);
          ref.out[o_at(b, i, h) + d] = testing::round_to(dtype, testing::sum(terms) / l);
        }
        ref.lse[(b * H + h) * S + i] = m + testing::log(l);
      }
      for (int64_t i = 0; i < S; ++i) {
        const Approx d_i = dot(dout, o_at(b, i, h), ref.out, o_at(b, i, h));
        std::vector<std::vector<Approx>> dq_terms(hd);
        for (int64_t j = 0; j <= i; ++j) {
          const Approx p = testing::exp(s[i][j] - ref.lse[(b * H + h) * S + i]);
          const Approx ds = p * (dot(dout, o_at(b, i, h), x, v_at(b, j, g)) - d_i);
          for (int64_t d = 0; d < hd; ++d) {
            dq_terms[d].push_back(ds * x[k_at(b, j, g) + d]);
            dk_terms[k_at(b, j, g) + d].push_back(ds * x[q_at(b, i, h) + d]);
            dv_terms[v_at(b, j, g) + d].push_back(p * exact(dout[o_at(b, i, h) + d]));
          }
        }
        for (int64_t d = 0; d < hd; ++d) {
          ref.dqkv[q_at(b, i, h) + d] = testing::round_to(dtype, testing::sum(dq_terms[d]) * scale);
        }
      }
    }
  }
  for (size_t at = 0; at < dk_terms.size(); ++at) {
    if (!dk_terms[at].empty())
      ref.dqkv[at] = testing::round_to(dtype, testing::sum(dk_terms[at]) * scale);
    if (!dv_terms[at].empty()) ref.dqkv[at] = testing::round_to(dtype, testing::sum(dv_terms[at]));
  }
  return ref;
}

// Runs forward and backward on `device`; returns out, lse and dqkv.
struct AttnRun {
  std::vector<double> out, lse, dqkv;
};
AttnRun run(Device device, const AttnCase& c, DType dtype, const std::vector<double>& qkv,
            const std::vector<double>& dout, int threads, size_t workspace_offset = 0) {
  const auto x = testing::upload(device, dtype, {c.tokens(), c.width()}, qkv);
  const auto g = testing::upload(device, dtype, {c.tokens(), c.out_width()}, dout);
  const auto out = testing::upload(device, dtype, {kBatch, c.seq_len, c.out_width()},
                                   std::vector<double>(c.tokens() * c.out_width(), NAN));
  const auto lse = testing::upload(device, DType::f32, {kBatch, c.n_heads, c.seq_len},
                                   std::vector<double>(kBatch * c.n_heads * c.seq_len, NAN));
  const auto dx = testing::upload(device, dtype, {c.tokens(), c.width()},
                                  std::vector<double>(c.tokens() * c.width(), NAN));
  const size_t bytes = kernels::attention_workspace_bytes(c.seq_len, c.head_dim, threads);
  const Buffer ws(device, bytes + workspace_offset);
  const Tensor w = ws.view(DType::u8, {static_cast<int64_t>(bytes)}, workspace_offset);
  kernels::attention_forward(x.tensor, out.tensor, lse.tensor, kBatch, c.seq_len, c.n_heads,
                             c.n_kv_heads, c.head_dim, w);
  kernels::attention_backward(g.tensor, x.tensor, out.tensor, lse.tensor, dx.tensor, kBatch,
                              c.seq_len, c.n_heads, c.n_kv_heads, c.head_dim, w);
  return {testing::download(out.tensor), testing::download(lse.tensor),
          testing::download(dx.tensor)};
}

class AttentionOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(AttentionOnDevice, ForwardAndBackwardMatchFloat64WithinRunningErrorBounds) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  for (const AttnCase& c : kCases) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = c.name() + " " + dtype_name(dtype);
      // Scores up to ~|2 * 2| * hd / sqrt(hd): peaked and flat softmax rows alike.
      std::vector<double> qkv = testing::uniform(c.tokens() * c.width(), -2, 2, rng);
      std::vector<double> dout = testing::uniform(c.tokens() * c.out_width(), -1, 1, rng);
      testing::round_in_place(dtype, qkv);
      testing::round_in_place(dtype, dout);
      // The workspace at an odd address: the kernel aligns inside it.
      const AttnRun got = run(device, c, dtype, qkv, dout, 0, 1);
      const AttnReference ref = reference(c, qkv, dout, dtype);
      testing::expect_within(got.out, ref.out, what + " out");
      testing::expect_within(got.lse, ref.lse, what + " lse");
      testing::expect_within(got.dqkv, ref.dqkv, what + " dqkv");
    }
  }
}

TEST_P(AttentionOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  for (const AttnCase& c : {kCases[0], kCases[1]}) {
    std::vector<double> qkv = testing::uniform(c.tokens() * c.width(), -1, 1, rng);
    std::vector<double> r = testing::uniform(c.tokens() * c.out_width(), -1, 1, rng);
    testing::round_in_place(DType::f32, qkv);
    testing::round_in_place(DType::f32, r);
    const AttnRun got = run(device, c, DType::f32, qkv, r, 0);
    const AttnReference ref = reference(c, qkv, r, DType::f32);
    std::vector<double> out_bound, grad_bound;
    for (const Approx& a : ref.out) out_bound.push_back(a.e);
    for (const Approx& a : ref.dqkv) grad_bound.push_back(a.e);

    const auto out = testing::upload(device, DType::f32, {c.tokens(), c.out_width()},
                                     std::vector<double>(c.tokens() * c.out_width()));
    const auto lse = testing::upload(device, DType::f32, {kBatch * c.n_heads * c.seq_len},
                                     std::vector<double>(kBatch * c.n_heads * c.seq_len));
    const Buffer ws(device, kernels::attention_workspace_bytes(c.seq_len, c.head_dim));
    const Tensor w = ws.view(DType::u8, {static_cast<int64_t>(ws.bytes())});
    auto forward = [&](const std::vector<double>& xs) {
      const auto x = testing::upload(device, DType::f32, {c.tokens(), c.width()}, xs);
      kernels::attention_forward(x.tensor, out.tensor, lse.tensor, kBatch, c.seq_len, c.n_heads,
                                 c.n_kv_heads, c.head_dim, w);
      return testing::download(out.tensor);
    };
    // L = sum r out; h = 2^-5 of the inputs' scale (|qkv| < 1): truncation estimated
    // from the h / 2h pair, rounding from the forward bounds (see the helper).
    testing::expect_gradient_matches_finite_differences(
        qkv, forward, r, out_bound, got.dqkv, grad_bound, 0x1p-5, "attention " + c.name());
  }
}

TEST_P(AttentionOnDevice, ResultsAreTheSameBitsForAnyThreadCount) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  const AttnCase c{4, 2, 16, 67};  // large enough for the kernels to start a team
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::vector<double> qkv = testing::uniform(c.tokens() * c.width(), -2, 2, rng);
    const std::vector<double> dout = testing::uniform(c.tokens() * c.out_width(), -1, 1, rng);
    // A workspace with room for one thread makes the kernels run on one.
    const AttnRun one = run(device, c, dtype, qkv, dout, 1);
    const AttnRun four = run(device, c, dtype, qkv, dout, 4);
    EXPECT_EQ(one.out, four.out) << dtype_name(dtype);
    EXPECT_EQ(one.lse, four.lse) << dtype_name(dtype);
    EXPECT_EQ(one.dqkv, four.dqkv) << dtype_name(dtype);
  }
  omp_set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Devices, AttentionOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(AttentionErrors, HeadsShapesWorkspaceAndCudaAreChecked) {
  const Device cpu = Device::cpu();
  const int64_t B = 2, S = 3, H = 4, Hkv = 2, hd = 8, T = B * S, W = (H + 2 * Hkv) * hd;
  const auto qkv = testing::upload(cpu, DType::f32, {T, W}, std::vector<double>(T * W));
  const auto out = testing::upload(cpu, DType::f32, {T, H * hd}, std::vector<double>(T * H * hd));
  const auto out_bf16 =
      testing::upload(cpu, DType::bf16, {T, H * hd}, std::vector<double>(T * H * hd));
  const auto lse = testing::upload(cpu, DType::f32, {B, H, S}, std::vector<double>(B * H * S));
  const auto lse_short =
      testing::upload(cpu, DType::f32, {B, H, S - 1}, std::vector<double>(B * H * (S - 1)));
  const auto dqkv = testing::upload(cpu, DType::f32, {T, W}, std::vector<double>(T * W));
  const size_t need = kernels::attention_workspace_bytes(S, hd, 1);
  const Buffer ws(cpu, need);
  const Tensor w = ws.view(DType::u8, {static_cast<int64_t>(need)});
  const Tensor w_small = ws.view(DType::u8, {static_cast<int64_t>(need - 1)});
  const char* fwd = "attention_forward";
  const char* bwd = "attention_backward";
  testing::expect_op_error(
      [&] { kernels::attention_forward(qkv.tensor, out.tensor, lse.tensor, B, S, 4, 3, hd, w); },
      fwd, "n_heads=4 is not a positive multiple of n_kv_heads=3");
  testing::expect_op_error(
      [&] {
        kernels::attention_backward(out.tensor, qkv.tensor, out.tensor, lse.tensor, dqkv.tensor, B,
                                    S, 6, 4, hd, w);
      },
      bwd, "n_heads=6 is not a positive multiple of n_kv_heads=4");
  testing::expect_op_error(
      [&] { kernels::attention_forward(qkv.tensor, out.tensor, lse.tensor, B, S, H, 1, hd, w); },
      fwd, "qkv must be f32 or bf16 [6, 48]");
  testing::expect_op_error(
      [&] {
        kernels::attention_forward(qkv.tensor, out_bf16.tensor, lse.tensor, B, S, H, Hkv, hd, w);
      },
      fwd, "out must have qkv's dtype f32");
  testing::expect_op_error(
      [&] {
        kernels::attention_forward(qkv.tensor, out.tensor, lse_short.tensor, B, S, H, Hkv, hd, w);
      },
      fwd, "lse must be f32 with 24 elements");
  testing::expect_op_error(
      [&] {
        kernels::attention_forward(qkv.tensor, out.tensor, lse.tensor, B, S, H, Hkv, hd, w_small);
      },
      fwd, "the workspace must hold at least " + std::to_string(need) + " bytes");
  testing::expect_op_error(
      [&] {
        kernels::attention_backward(out.tensor, qkv.tensor, out.tensor, lse.tensor, dqkv.tensor, B,
                                    S, H, Hkv, hd, Tensor());
      },
      bwd, "size it with attention_workspace_bytes");
  testing::expect_op_error(
      [&] {
        kernels::attention_backward(out.tensor, qkv.tensor, out.tensor, lse.tensor, qkv.tensor, B,
                                    S, H, Hkv, hd, w);
      },
      bwd, "dqkv and qkv overlap");
  auto on_cuda = [](Tensor t) { return t.device = Device::cuda(0), t; };
  testing::expect_op_error(
      [&] {
        kernels::attention_forward(on_cuda(qkv.tensor), on_cuda(out.tensor), on_cuda(lse.tensor), B,
                                   S, H, Hkv, hd, on_cuda(w));
      },
      fwd, "has no CUDA implementation yet");
  testing::expect_op_error(
      [&] {
        kernels::attention_backward(on_cuda(out.tensor), on_cuda(qkv.tensor), on_cuda(out.tensor),
                                    on_cuda(lse.tensor), on_cuda(dqkv.tensor), B, S, H, Hkv, hd,
                                    on_cuda(w));
      },
      bwd, "has no CUDA implementation yet");
}

}  // namespace
}  // namespace octet
