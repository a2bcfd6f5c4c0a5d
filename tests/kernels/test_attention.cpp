// tests/kernels/test_attention.cpp: kernels::attention_forward/backward (causal, MHA
// and GQA) against a float64 reference that materialises the full score matrix, with
// bounds derived for each way the kernels evaluate it (fp32; bf16 tensor cores), against
// finite differences, the CUDA kernels against the CPU kernels and each other, the
// determinism of the results, and the errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;
using testing::kU;

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
// GQA and MHA at small odd lengths; S=37 spans two 32-key blocks of the CPU backward pass.
const AttnCase kCases[] = {{4, 2, 8, 9}, {4, 4, 16, 7}, {4, 2, 16, 37}};
// The CUDA instance adds the tensor-core head dims (64, 128) at lengths that are one
// token, one partial tile, and many 32/64-row tiles with a partial last one (200, 333,
// 1000), MHA and GQA (groups of 2 and 4), and an odd head dim (40) for the simple kernel.
#if defined(OCTET_CUDASIM)
// On the emulated device (one fiber per CUDA thread, every shuffle a warp rendezvous) the
// same kinds of shapes at shorter lengths: one token, one partial tile, several 64-row tiles
// with a partial last one (130, 200), MHA and GQA (groups of 2 and 4), an odd head dim.
const AttnCase kCudaCases[] = {{4, 2, 64, 1},   {4, 4, 64, 17},  {2, 1, 128, 130},
                               {2, 2, 128, 77}, {1, 1, 64, 200}, {2, 1, 40, 70}};
#else
const AttnCase kCudaCases[] = {{4, 2, 64, 1},    {4, 4, 64, 17},   {4, 1, 128, 200},
                               {2, 2, 128, 333}, {2, 1, 64, 1000}, {4, 2, 40, 130}};
#endif

// How the kernel under test evaluates the formulas; it decides the error bounds.
enum class Path {
  fp32,   // the CPU kernels and the simple CUDA kernels: fp32 throughout
  amx,    // the CPU's tiled kernels on AMX (bf16, head_dim a multiple of 32, OCTET_CPU_ISA
          // allowing it): fp32, with P and dS split into three bf16 parts for their products
  flash,  // the CUDA tensor-core kernels (bf16 with head_dim 64 or 128)
};
Path path_of(Device device, DType dtype, const AttnCase& c) {
  if (device.is_cpu()) {
    const bool amx =
        dtype == DType::bf16 && c.head_dim % 32 == 0 && kernels::cpu::usable_amx("attention");
    return amx ? Path::amx : Path::fp32;
  }
  const bool flash = dtype == DType::bf16 && (c.head_dim == 64 || c.head_dim == 128);
  return flash ? Path::flash : Path::fp32;
}

// The tensor cores' fp32 accumulation: mma.sync adds its 16 exact bf16 products and the
// accumulator after aligning them to the largest and truncating (Fasi et al., "Numerical
// behavior of NVIDIA tensor cores", PeerJ CS 2021), keeping at least 23 bits: each addend
// loses less than 2^-22 of the largest, itself at most the sum of magnitudes so far.
// Over n terms (<= n steps, each adding the accumulator once more) that is < 2 n 2^-22.
constexpr double kUTensorCore = 0x1p-22;
// exp2f: 2 ulp (CUDA Programming Guide, maximum ulp errors) = 4u relative.
constexpr double kUExp2 = 4 * kU;
// The forward key tile of the flash kernel: the online softmax rescales once per tile.
constexpr int64_t kFlashKeyTile = 64;

// A sum of Approx terms accumulated one at a time (the long cases have too many terms
// to keep as lists), with the bound of the way the kernel sums them.
struct Sum {
  double v = 0.0, e = 0.0, mag = 0.0;
  int64_t n = 0;
  void add(Approx x) { v += x.v, e += x.e, mag += std::abs(x.v) + x.e, ++n; }
  // fp32 adds in any order: testing::sum's bound.
  Approx fp32() const { return {v, e + (n > 1 ? testing::gamma(n - 1) * mag : 0.0)}; }
  // A product's sum (q.k, dout.v; Path::amx takes them from tdpbf16ps, exact products added in
  // fp32: fp32's bound).
  Approx on(Path path) const {
    return path == Path::flash ? Approx{v, e + 2.0 * n * kUTensorCore * mag} : fp32();
  }
  // A sum of products with P or dS (P v, dS k, dS q, P dout). Path::amx adds three exact terms
  // per term, the products of P's or dS's three bf16 parts (kernels/cpu/attention_amx.h), whose
  // magnitudes add to the term's: fp32's bound over 3n terms. Each part below 2^-126 and each
  // product below it is flushed to zero: less than 3 2^-126 (1 + |other operand|) a term, with
  // the other operands (v, k, q, dout) in [-1, 1] here.
  Approx of_split_products(Path path) const {
    if (path != Path::amx) return on(path);
    return {v, e + testing::gamma(3 * n - 1) * mag + 6.0 * static_cast<double>(n) * 0x1p-126};
  }
};

// A bf16 operand of a tensor-core product: P and dS rounded (2^-8 relative).
Approx operand(Path path, Approx a) {
  return path == Path::flash ? testing::round_to(DType::bf16, a) : a;
}

// The flash kernels' exp2(x - m): the argument's error, exp2f's, `rel` more, and 2^-126
// absolute for results that exp2f flushes to zero or makes subnormal.
Approx exp_flash(Approx a, double rel) {
  const double v = std::exp(a.v);
  const double e0 = v * std::expm1(a.e);
  return {v, e0 + std::expm1(kUExp2 + rel) * (v + e0) + 0x1p-126};
}

// The kernel's formulas in float64, step by step, each value with the running error
// bound of its evaluation (testing::Approx): these bounds are the tolerances.
//   s_ij = (q_i . k_j) * fl(1/sqrt(hd)); m_i = max_j s_ij (the computed max errs by at
//   most max_j bound(s_ij)); p_ij = exp(s_ij - m_i); l_i = sum_j p_ij;
//   out_i = (sum_j p_ij v_j) / l_i; lse_i = m_i + log(l_i);
//   D_i = dout_i . out_i (out as stored); P_ij = exp(s_ij - lse_i); dS_ij = P_ij (dout_i .
//   v_j - D_i); dq_i = (sum_j dS_ij k_j) * scale; dk_j = (sum_{h, i} dS_ij q_i) * scale;
//   dv_j = sum_{h, i} P_ij dout_i.
// bf16 results add 2^-8 relative (round_to). Path::flash (see above) differs in: the
// products q.k, p v, dout.v, dS k, dS q and P dout on tensor cores (Sum::on), P and dS
// rounded to bf16 as their operands, exp2f in log2 units (the argument errs as the
// reference's does: fl(log2(e)/sqrt(hd)) is within the reference's scale bound), the
// saved lse scaled by fl(log2 e) in fp32 (2u |lse| more), and the forward's online
// softmax: each of the i / 64 rescalings multiplies the earlier terms by an exp2f (4u)
// and rounds the product (u), and the rounding of the running-max differences adds at
// most u (m_last - m_first) <= 2u max_j |s_ij| to the exponent.
struct AttnReference {
  std::vector<Approx> out, lse, dqkv;
};

AttnReference reference(const AttnCase& c, const std::vector<double>& qkv,
                        const std::vector<double>& dout, DType dtype, Path path) {
  const int64_t S = c.seq_len, hd = c.head_dim, H = c.n_heads, W = c.width(), OW = c.out_width();
  const int64_t group = c.n_heads / c.n_kv_heads;
  const bool flash = path == Path::flash;
  const Approx scale = exact(1.0) / testing::sqrt(exact(static_cast<double>(hd)));
  auto q_at = [&](int64_t b, int64_t i, int64_t h) { return (b * S + i) * W + h * hd; };
  auto k_at = [&](int64_t b, int64_t j, int64_t g) { return q_at(b, j, H + g); };
  auto v_at = [&](int64_t b, int64_t j, int64_t g) { return q_at(b, j, H + c.n_kv_heads + g); };
  auto o_at = [&](int64_t b, int64_t i, int64_t h) { return (b * S + i) * OW + h * hd; };
  auto dot = [&](const std::vector<double>& a, int64_t ia, const std::vector<Approx>& b,
                 int64_t ib) {
    Sum sum;
    for (int64_t d = 0; d < hd; ++d) sum.add(exact(a[ia + d]) * b[ib + d]);
    return sum;
  };
  std::vector<Approx> x;
  for (double v : qkv) x.push_back(exact(v));

  AttnReference ref{std::vector<Approx>(c.tokens() * OW), std::vector<Approx>(kBatch * H * S),
                    std::vector<Approx>(c.tokens() * W, exact(0.0))};
  std::vector<Sum> dkv(c.tokens() * W);  // dk and dv, at the columns of k and v
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      std::vector<std::vector<Approx>> s(S);  // the full (causal) score matrix
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j <= i; ++j)
          s[i].push_back(dot(qkv, q_at(b, i, h), x, k_at(b, j, g)).on(path) * scale);
      }
      for (int64_t i = 0; i < S; ++i) {
        Approx m{-INFINITY, 0.0};
        double s_max = 0.0;
        for (const Approx& sij : s[i]) {
          m.v = std::max(m.v, sij.v), m.e = std::max(m.e, sij.e);
          s_max = std::max(s_max, std::abs(sij.v) + sij.e);
        }
        const double rescaling = static_cast<double>(i / kFlashKeyTile) * 5 * kU + 2 * kU * s_max;
        std::vector<Approx> p_in;  // p as the product p v takes it
        Sum l;
        for (const Approx& sij : s[i]) {
          const Approx p = flash ? exp_flash(sij - m, rescaling) : testing::exp(sij - m);
          l.add(p);
          p_in.push_back(operand(path, p));
        }
        for (int64_t d = 0; d < hd; ++d) {
          Sum num;
          for (int64_t j = 0; j <= i; ++j) num.add(p_in[j] * x[v_at(b, j, g) + d]);
          ref.out[o_at(b, i, h) + d] =
              testing::round_to(dtype, num.of_split_products(path) / l.fp32());
        }
        ref.lse[(b * H + h) * S + i] = m + testing::log(l.fp32());
      }
      for (int64_t i = 0; i < S; ++i) {
        const Approx d_i = dot(dout, o_at(b, i, h), ref.out, o_at(b, i, h)).fp32();
        Approx lse = ref.lse[(b * H + h) * S + i];
        if (flash) lse.e += 2 * kU * std::abs(lse.v);
        std::vector<Sum> dq(hd);
        for (int64_t j = 0; j <= i; ++j) {
          const Approx p = flash ? exp_flash(s[i][j] - lse, 0.0) : testing::exp(s[i][j] - lse);
          const Approx ds = p * (dot(dout, o_at(b, i, h), x, v_at(b, j, g)).on(path) - d_i);
          const Approx ds_in = operand(path, ds), p_in = operand(path, p);
          for (int64_t d = 0; d < hd; ++d) {
            dq[d].add(ds_in * x[k_at(b, j, g) + d]);
            dkv[k_at(b, j, g) + d].add(ds_in * x[q_at(b, i, h) + d]);
            dkv[v_at(b, j, g) + d].add(p_in * exact(dout[o_at(b, i, h) + d]));
          }
        }
        for (int64_t d = 0; d < hd; ++d)
          ref.dqkv[q_at(b, i, h) + d] =
              testing::round_to(dtype, dq[d].of_split_products(path) * scale);
      }
    }
  }
  for (int64_t t = 0; t < c.tokens(); ++t) {
    for (int64_t col = H * hd; col < W; ++col) {
      const int64_t at = t * W + col;
      const bool is_k = col < (H + c.n_kv_heads) * hd;
      if (dkv[at].n > 0)
        ref.dqkv[at] = testing::round_to(dtype, is_k ? dkv[at].of_split_products(path) * scale
                                                     : dkv[at].of_split_products(path));
    }
  }
  return ref;
}

// `values` as dtype on `device`, `offset_bytes` into its buffer (2: a view that is not
// 16-byte aligned, which the CUDA kernels take to the simple path).
testing::DeviceTensor upload_at(Device device, DType dtype, Shape shape,
                                const std::vector<double>& values, size_t offset_bytes) {
  const testing::DeviceTensor packed = testing::upload(device, dtype, shape, values);
  testing::DeviceTensor t{Buffer(device, packed.tensor.nbytes() + offset_bytes), {}};
  t.tensor = t.buffer.view(dtype, shape, offset_bytes);
  copy_bytes(t.tensor.data, device, packed.tensor.data, device, packed.tensor.nbytes());
  return t;
}

// Runs forward and backward on `device`; returns out, lse and dqkv.
struct AttnRun {
  std::vector<double> out, lse, dqkv;
};
AttnRun run(Device device, const AttnCase& c, DType dtype, const std::vector<double>& qkv,
            const std::vector<double>& dout, int threads, size_t workspace_offset = 0,
            size_t qkv_offset = 0) {
  const auto x = upload_at(device, dtype, {c.tokens(), c.width()}, qkv, qkv_offset);
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

// Two kernels each within `bound` of the reference differ by at most twice the bound.
void expect_agree(const std::vector<double>& a, const std::vector<double>& b,
                  const std::vector<Approx>& bound, const std::string& what) {
  std::vector<Approx> twice;
  for (size_t i = 0; i < b.size(); ++i) twice.push_back({b[i], 2.0 * bound[i].e});
  testing::expect_within(a, twice, what);
}

// qkv in [-2, 2): scores up to ~4 sqrt(hd), peaked and flat softmax rows alike.
struct AttnInputs {
  std::vector<double> qkv, dout;
};
AttnInputs inputs(const AttnCase& c, DType dtype, testing::Rng& rng) {
  AttnInputs in{testing::uniform(c.tokens() * c.width(), -2, 2, rng),
                testing::uniform(c.tokens() * c.out_width(), -1, 1, rng)};
  testing::round_in_place(dtype, in.qkv);
  testing::round_in_place(dtype, in.dout);
  return in;
}

class AttentionOnDevice : public ::testing::TestWithParam<Device> {};

// The CPU kernels exist three times, chosen by the instruction set (OCTET_CPU_ISA caps it):
// the tiled kernels (tiles of 32 query rows and 32 keys) with AVX-512 or AVX2 and SLEEF, and
// the scalar ones. All evaluate the same formulas in fp32 (sums in other orders, exp within 1 ulp
// as libm's), so the same bounds hold for all. Where the machine has AVX512_BF16, the tiled kernels
// take the score products q.k^T and dout.v^T of bf16 data (even head_dim) from vdpbf16ps: the
// product of two bf16 values (8-bit significands) is exact in fp32 and each is added to the fp32
// sum with one rounding to nearest, so these are fp32 sums of exact terms in another order, within
// the same (order-free) fp32 bound. Its denormal flushing changes a partial sum by less than
// 2^-126, which inputs in [-1, 1] (no bf16 denormals) leave far below that bound. Where the
// machine has AMX (OCTET_CPU_ISA=amx, its default), bf16 data with head_dim a multiple of 32 takes
// every product from AMX's tiles, P and dS split into three bf16 parts: Path::amx. S=100 at
// head_dim 64 spans four tiles with a partial last one; head_dim 20 leaves part of a vector of
// every row unused; head_dim 44 takes the accumulation's three-vector rows (AVX-512) and a 32-lane
// chunk then a partial one (AVX2). On AMX, head_dim 128 takes two groups of four column tiles
// and 32 one group of two, at a partial last tile.
const AttnCase kCpuTileCases[] = {
    {2, 1, 64, 100}, {2, 1, 20, 45}, {2, 1, 44, 70}, {2, 1, 128, 70}, {2, 2, 32, 33}};

// Runs `body` once per CPU instruction-set level (the machine's best last), or once on CUDA.
template <typename Body>
void for_each_isa(Device device, Body body) {
  if (device.is_cuda()) return body();
  testing::for_each_cpu_isa(body);
}

TEST_P(AttentionOnDevice, ForwardAndBackwardMatchFloat64WithinRunningErrorBounds) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  std::vector<AttnCase> cases(std::begin(kCases), std::end(kCases));
  if (device.is_cuda()) cases.insert(cases.end(), std::begin(kCudaCases), std::end(kCudaCases));
  if (device.is_cpu())
    cases.insert(cases.end(), std::begin(kCpuTileCases), std::end(kCpuTileCases));
  for_each_isa(device, [&] {
    for (const AttnCase& c : cases) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        const Path path = path_of(device, dtype, c);
        const std::string what =
            c.name() + " " + dtype_name(dtype) + (path == Path::flash ? " (tensor cores)" : "");
        const AttnInputs in = inputs(c, dtype, rng);
        // The workspace at an odd address: the CPU kernel aligns inside it.
        const AttnRun got = run(device, c, dtype, in.qkv, in.dout, 0, 1);
        const AttnReference ref = reference(c, in.qkv, in.dout, dtype, path);
        testing::expect_within(got.out, ref.out, what + " out");
        testing::expect_within(got.lse, ref.lse, what + " lse");
        testing::expect_within(got.dqkv, ref.dqkv, what + " dqkv");
        if (device.is_cpu()) continue;
        // The CPU kernel is within its own (fp32) bounds, which the flash bounds contain
        // term by term, so the devices differ by at most twice the bounds used here.
        const AttnRun cpu = run(Device::cpu(), c, dtype, in.qkv, in.dout, 0);
        expect_agree(got.out, cpu.out, ref.out, what + " out vs cpu");
        expect_agree(got.lse, cpu.lse, ref.lse, what + " lse vs cpu");
        expect_agree(got.dqkv, cpu.dqkv, ref.dqkv, what + " dqkv vs cpu");
      }
    }
  });
}

// bf16 at the tensor-core head dims once on the flash kernels (aligned tensors) and once
// on the simple kernel (qkv 2 bytes into its buffer): both within their own bounds, and
// apart by at most the sum of the two.
TEST_P(AttentionOnDevice, FlashKernelsMatchTheSimpleKernel) {
  const Device device = GetParam();
  if (device.is_cpu()) GTEST_SKIP() << "compares the two CUDA implementations";
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const AttnCase& c : {AttnCase{4, 2, 64, 130}, AttnCase{2, 1, 128, 77}}) {
    const AttnInputs in = inputs(c, DType::bf16, rng);
    const AttnRun flash = run(device, c, DType::bf16, in.qkv, in.dout, 0);
    const AttnRun simple = run(device, c, DType::bf16, in.qkv, in.dout, 0, 0, 2);
    const AttnReference ref_flash = reference(c, in.qkv, in.dout, DType::bf16, Path::flash);
    const AttnReference ref_simple = reference(c, in.qkv, in.dout, DType::bf16, Path::fp32);
    testing::expect_within(flash.out, ref_flash.out, c.name() + " flash out");
    testing::expect_within(flash.lse, ref_flash.lse, c.name() + " flash lse");
    testing::expect_within(flash.dqkv, ref_flash.dqkv, c.name() + " flash dqkv");
    testing::expect_within(simple.out, ref_simple.out, c.name() + " simple out");
    testing::expect_within(simple.lse, ref_simple.lse, c.name() + " simple lse");
    testing::expect_within(simple.dqkv, ref_simple.dqkv, c.name() + " simple dqkv");
    // ref_flash's bounds contain ref_simple's: twice them covers the difference.
    expect_agree(flash.out, simple.out, ref_flash.out, c.name() + " flash vs simple out");
    expect_agree(flash.lse, simple.lse, ref_flash.lse, c.name() + " flash vs simple lse");
    expect_agree(flash.dqkv, simple.dqkv, ref_flash.dqkv, c.name() + " flash vs simple dqkv");
  }
}

TEST_P(AttentionOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const AttnCase& c : {kCases[0], kCases[1]}) {
    std::vector<double> qkv = testing::uniform(c.tokens() * c.width(), -1, 1, rng);
    std::vector<double> r = testing::uniform(c.tokens() * c.out_width(), -1, 1, rng);
    testing::round_in_place(DType::f32, qkv);
    testing::round_in_place(DType::f32, r);
    const AttnRun got = run(device, c, DType::f32, qkv, r, 0);
    const AttnReference ref = reference(c, qkv, r, DType::f32, Path::fp32);
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

// The CPU kernels give the same bits on any thread count; the CUDA kernels (no atomics,
// fixed orders of summation) the same bits on every run, on both paths.
TEST_P(AttentionOnDevice, ResultsAreTheSameBitsForAnyThreadCount) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  // Large enough for the kernels to start a team. The CPU backward runs one fused task per
  // (sequence, kv head) where those share out evenly over the team, otherwise two passes: on
  // 4 threads the first case of each pair is fused, the second (2 such tasks) is not; on 1 all
  // are. (The forward likewise: one task per kv head, or per query tile.) head_dim 64 takes the
  // AMX products where the machine has them.
  std::vector<AttnCase> cases = {{4, 2, 16, 67}, {2, 1, 16, 67}, {4, 2, 64, 67}, {2, 1, 64, 67}};
#if defined(OCTET_CUDASIM)
  if (device.is_cuda()) cases.push_back({2, 1, 128, 130});  // emulated: shorter, still 3 tiles
#else
  if (device.is_cuda()) cases.push_back({4, 1, 128, 200});
#endif
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  for_each_isa(device, [&] {
    for (const AttnCase& c : cases) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        const AttnInputs in = inputs(c, dtype, rng);
        // A workspace with room for one thread makes the CPU kernels run on one.
        const AttnRun one = run(device, c, dtype, in.qkv, in.dout, 1);
        const AttnRun four = run(device, c, dtype, in.qkv, in.dout, 4);
        EXPECT_EQ(one.out, four.out) << c.name() << " " << dtype_name(dtype);
        EXPECT_EQ(one.lse, four.lse) << c.name() << " " << dtype_name(dtype);
        EXPECT_EQ(one.dqkv, four.dqkv) << c.name() << " " << dtype_name(dtype);
      }
    }
  });
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
  // Host memory labelled as the first CUDA device this machine does not have: refused
  // before any kernel could touch it, in builds with and without CUDA.
  const Device missing = Device::cuda(cuda_device_count());
  const std::string no_gpu = cuda_compiled() ? "usable GPU(s)" : "built without CUDA";
  auto on_cuda = [&](Tensor t) { return t.device = missing, t; };
  testing::expect_op_error(
      [&] {
        kernels::attention_forward(on_cuda(qkv.tensor), on_cuda(out.tensor), on_cuda(lse.tensor), B,
                                   S, H, Hkv, hd, Tensor());
      },
      fwd, no_gpu);
  testing::expect_op_error(
      [&] {
        kernels::attention_backward(on_cuda(out.tensor), on_cuda(qkv.tensor), on_cuda(out.tensor),
                                    on_cuda(lse.tensor), on_cuda(dqkv.tensor), B, S, H, Hkv, hd,
                                    Tensor());
      },
      bwd, no_gpu);
}

}  // namespace
}  // namespace octet
