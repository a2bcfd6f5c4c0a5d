// cli/bench/bench_gemm.cpp: `octet bench gemm`: times f32, bf16 and FP8 GEMMs (and
// OpenBLAS sgemm beside them on the CPU), the FP8 GEMM under each scaling mode with and
// without the quantization of its operands, and the FP8 conversions of one device; with
// --layer, the twelve GEMMs of one transformer layer in bf16 and under FP8 recipes.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "convert_bench.h"
#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "fp8/gemm.h"
#include "fp8/quantized_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "kernels/gemm.h"
#include "model/config.h"
#include "nn/linear.h"

#if defined(OCTET_HAVE_OPENBLAS)
#include <cblas.h>
#endif

namespace octet::bench {
namespace {

// One timed configuration: the median of at least `reps` calls (more for short
// calls, up to ~0.1 s of them) after a warm-up of at least 0.25 s. The long
// warm-up matters on small machines: OpenBLAS' threads spin for ~0.1 s after
// each call (and at start-up), and OpenMP's after theirs, stealing the cores
// from whatever runs next.
double median_seconds(const std::function<void()>& fn, int reps) {
  return median_call_seconds(fn, reps, 200, 0.1);
}

struct Row {
  const char* dtype;  // operand dtype
  const char* out;    // C's dtype
  const char* impl;
  double seconds;
};

// Square operands of every dtype, filled once with values in [-1, 1) (FP8 and
// bf16 are the rounded f32 values, so all GEMMs multiply comparable data).
struct Operands {
  Buffer a32, b32, a16, b16, a8, b8, c32, c16, scales, workspace, workspace16;
  Tensor ta32, tb32, ta16, tb16, ta8, tb8, tc32, tc16;
  kernels::GemmOptions fp8_options;   // K-major (trans_b) like all GEMMs here
  kernels::GemmOptions bf16_options;  // its workspace: the onednn-f32 engine's f32 copies
};

Operands make_operands(Device device, int64_t n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(n * n), b(n * n);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  std::vector<uint16_t> a16(n * n), b16(n * n);
  std::vector<uint8_t> a8(n * n), b8(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a16[i] = f32_to_bf16(a[i]);
    b16[i] = f32_to_bf16(b[i]);
    a8[i] = f32_to_e4m3(a[i] * 448.0f);  // per-tensor scale 448 / amax, amax = 1
    b8[i] = f32_to_e4m3(b[i] * 448.0f);
  }
  Operands o;
  auto upload = [&](Buffer& buf, Tensor& t, DType dtype, const void* host) {
    buf = Buffer::for_tensor(device, dtype, {n, n});
    t = buf.tensor(dtype, {n, n});
    if (host) copy_bytes(t.data, device, host, Device::cpu(), t.nbytes());
  };
  upload(o.a32, o.ta32, DType::f32, a.data());
  upload(o.b32, o.tb32, DType::f32, b.data());
  upload(o.a16, o.ta16, DType::bf16, a16.data());
  upload(o.b16, o.tb16, DType::bf16, b16.data());
  upload(o.a8, o.ta8, DType::e4m3, a8.data());
  upload(o.b8, o.tb8, DType::e4m3, b8.data());
  upload(o.c32, o.tc32, DType::f32, nullptr);
  upload(o.c16, o.tc16, DType::bf16, nullptr);
  const float scale_inv[2] = {1.0f / 448.0f, 1.0f / 448.0f};
  o.scales = Buffer(device, sizeof scale_inv);
  copy_bytes(o.scales.data(), device, scale_inv, Device::cpu(), sizeof scale_inv);
  o.fp8_options.a_scale_inv = o.scales.view(DType::f32, {1, 1}, 0);
  o.fp8_options.b_scale_inv = o.scales.view(DType::f32, {1, 1}, 4);
  const size_t bytes = kernels::gemm_workspace_bytes(o.ta8, o.tb8, o.tc16, o.fp8_options);
  if (bytes > 0) {
    o.workspace = Buffer(device, bytes);
    o.fp8_options.workspace = o.workspace.view(DType::u8, {static_cast<int64_t>(bytes)});
  }
  const size_t bytes16 = kernels::gemm_workspace_bytes(o.ta16, o.tb16, o.tc32, o.bf16_options);
  if (bytes16 > 0) {
    o.workspace16 = Buffer(device, bytes16);
    o.bf16_options.workspace = o.workspace16.view(DType::u8, {static_cast<int64_t>(bytes16)});
  }
  return o;
}

std::vector<Row> time_size(Device device, const Operands& o, int64_t n, int reps,
                           const char* engine) {
  std::vector<Row> rows;
  rows.push_back(
      {"f32", "f32", engine, median_seconds([&] { kernels::gemm(o.ta32, o.tb32, o.tc32); }, reps)});
  rows.push_back(
      {"bf16", "f32", engine,
       median_seconds([&] { kernels::gemm(o.ta16, o.tb16, o.tc32, o.bf16_options); }, reps)});
  rows.push_back(
      {"e4m3", "bf16", engine,
       median_seconds([&] { kernels::gemm(o.ta8, o.tb8, o.tc16, o.fp8_options); }, reps)});
#if defined(OCTET_HAVE_OPENBLAS)
  if (device.is_cpu()) {
    const int ni = static_cast<int>(n);
    rows.push_back({"f32", "f32", "openblas",
                    median_seconds(
                        [&] {
                          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, ni, ni, 1.0f,
                                      o.ta32.as<float>(), ni, o.tb32.as<float>(), ni, 0.0f,
                                      o.tc32.as<float>(), ni);
                        },
                        reps)});
  }
#endif
  return rows;
}

// One FP8 scaling mode at one size: fp8::gemm on operands quantized beforehand, and
// fp8::quantize of both operands from bf16 (A as the activation, B as the weight, no
// transposed copies), each timed on its own.
struct ModeRow {
  const char* mode;
  double gemm_seconds;
  double quantize_seconds;
};

std::vector<ModeRow> time_modes(Device device, const Operands& o, int64_t n, int reps) {
  std::vector<ModeRow> rows;
  for (const fp8::ScalingModeInfo& info : fp8::scaling_modes()) {
    const char* mode = info.name;
    fp8::Recipe recipe;
    recipe.mode = info.mode;
    fp8::QuantizedTensor qa(device, n, n, recipe, fp8::Role::activation, false);
    fp8::QuantizedTensor qb(device, n, n, recipe, fp8::Role::weight, false);
    const bool delayed = recipe.mode == fp8::ScalingMode::tensor_delayed;
    fp8::DelayedScalingState state;
    if (delayed) {
      state = fp8::DelayedScalingState(
          device, recipe.delayed,
          {recipe.format(fp8::Role::activation), recipe.format(fp8::Role::weight)});
    }
    fp8::DelayedScalingState* st = delayed ? &state : nullptr;
    auto quantize_both = [&] {
      fp8::quantize(o.ta16, qa, recipe, st, delayed ? 0 : -1);
      fp8::quantize(o.tb16, qb, recipe, st, delayed ? 1 : -1);
    };
    quantize_both();
    if (delayed) {
      state.update();  // quantize with scales from this data's amax, as from the second step on
      quantize_both();
    }
    fp8::Fp8GemmOptions options;
    const fp8::Fp8Operand a = fp8::as_stored(qa), b = fp8::as_stored(qb);
    Buffer workspace;
    const size_t bytes = fp8::gemm_workspace_bytes(a, b, o.tc16, options);
    if (bytes > 0) {
      workspace = Buffer(device, bytes);
      options.workspace = workspace.view(DType::u8, {static_cast<int64_t>(bytes)});
    }
    const double gemm = median_seconds([&] { fp8::gemm(a, b, o.tc16, options); }, reps);
    const double quantize = median_seconds(quantize_both, reps);
    rows.push_back({mode, gemm, quantize});
  }
  return rows;
}

double gflops(int64_t n, double seconds) {
  return 2.0 * n * n * n / seconds * 1e-9;
}

const Row* find(const std::vector<Row>& rows, const std::string& dtype, const std::string& impl) {
  for (const Row& r : rows) {
    if (dtype == r.dtype && (impl.empty() ? std::string(r.impl) != "openblas" : impl == r.impl))
      return &r;
  }
  return nullptr;
}

std::string cell(int64_t n, double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%7.1f (%8.3f ms)", gflops(n, seconds), seconds * 1e3);
  return buf;
}

std::string cell(int64_t n, const Row* r) {
  return r ? cell(n, r->seconds) : "-";
}

int run(const BenchGemmOptions& args) {
  const Device device = device_from_name(args.device);
  const std::vector<long long> sizes =
      args.sizes.empty() ? std::vector<long long>{256, 512, 1024, 2048, 4096} : args.sizes;
  const int reps = args.reps > 0 ? args.reps : 10;
  const int threads = args.threads;
  for (long long n : sizes)
    OCTET_CHECK(n >= 16 && n % 16 == 0, "bench gemm",
                "sizes must be multiples of 16 (FP8 needs K % 16 == 0), got ", n);
  if (threads > 0) {
    omp_set_num_threads(threads);
#if defined(OCTET_HAVE_OPENBLAS)
    openblas_set_num_threads(threads);
#endif
  }
  if (args.impl != "auto") kernels::set_cpu_gemm_engine(args.impl);
  const char* engine = device.is_cpu() ? kernels::cpu_gemm_engine() : "cuda";
  JsonLines json(args.json, "bench gemm");

  std::printf(
      "octet bench gemm: %s, %d threads, engine %s, median of >= %d calls after a 0.25 s warm-up\n",
      device_name(device).c_str(), omp_get_max_threads(), engine, reps);
  std::printf(
      "C = A B^T, A and B [n, n] K-major; GFLOP/s (median milliseconds). f32 -> f32, bf16 -> f32, "
      "fp8 = e4m3 x e4m3 -> bf16 with scale_inv\n\n");
  std::printf("%6s | %-20s | %-20s | %-20s | %-20s | %-24s | %-20s\n", "n", "f32", "bf16",
              "fp8 e4m3", "openblas sgemm", "bf16 speed-up over oblas", "fp8 time / bf16 time");
  std::printf("%s\n", std::string(151, '-').c_str());
  std::vector<std::pair<long long, std::vector<ModeRow>>> mode_rows;
  for (long long n : sizes) {
    std::vector<Row> rows;
    {
      const Operands o = make_operands(device, n);
      rows = time_size(device, o, n, reps, engine);
      mode_rows.emplace_back(n, time_modes(device, o, n, reps));
    }
    const Row *f32 = find(rows, "f32", ""), *bf16 = find(rows, "bf16", ""),
              *fp8 = find(rows, "e4m3", ""), *blas = find(rows, "f32", "openblas");
    char speedup[32] = "-", fp8_ratio[32] = "-";
    if (blas) std::snprintf(speedup, sizeof speedup, "%.2fx", blas->seconds / bf16->seconds);
    std::snprintf(fp8_ratio, sizeof fp8_ratio, "%.2fx", fp8->seconds / bf16->seconds);
    std::printf("%6lld | %-20s | %-20s | %-20s | %-20s | %24s | %20s\n", n, cell(n, f32).c_str(),
                cell(n, bf16).c_str(), cell(n, fp8).c_str(), cell(n, blas).c_str(), speedup,
                fp8_ratio);
    std::fflush(stdout);
    const auto record = [&](const char* dtype, const char* out, const char* impl, const char* mode,
                            double seconds, double quantize_seconds) {
      Json j = {{"bench", "gemm"},
                {"device", device_name(device)},
                {"m", n},
                {"n", n},
                {"k", n},
                {"dtype", dtype},
                {"out", out},
                {"impl", impl},
                {"mode", mode},
                {"threads", omp_get_max_threads()},
                {"seconds", seconds},
                {"quantize_seconds", quantize_seconds},
                {"gflops", gflops(n, seconds)}};
      return j;
    };
    for (const Row& r : rows) json.write(record(r.dtype, r.out, r.impl, "none", r.seconds, 0.0));
    for (const ModeRow& r : mode_rows.back().second) {
      Json j = record("e4m3", "bf16", engine, r.mode, r.gemm_seconds, r.quantize_seconds);
      j["gflops_with_quantize"] = gflops(n, r.gemm_seconds + r.quantize_seconds);
      json.write(j);
    }
  }
  std::printf(
      "bf16 speed-up over oblas = OpenBLAS sgemm time / bf16 time (above 1: bf16 is faster); "
      "fp8 time / bf16 time: above 1, fp8 is slower (the cost of FP8)\n");

  std::printf(
      "\nFP8 scaling modes (E4M3 x E4M3 -> bf16): GEMM = fp8::gemm on operands quantized "
      "beforehand;\n"
      "quantize = fp8::quantize of A [n, n] bf16 (activation) and B [n, n] bf16 (weight), no "
      "transposed copies\n\n");
  std::printf("%6s | %-14s | %-20s | %-12s | %-20s | %9s\n", "n", "mode", "GEMM only",
              "quantize ms", "GEMM + quantize", "time / tensor");
  std::printf("%s\n", std::string(98, '-').c_str());
  for (const auto& [n, rs] : mode_rows) {
    const double tensor_total = rs.front().gemm_seconds + rs.front().quantize_seconds;
    for (const ModeRow& r : rs) {
      const double total = r.gemm_seconds + r.quantize_seconds;
      char quant[32], ratio[32];
      std::snprintf(quant, sizeof quant, "%8.3f", r.quantize_seconds * 1e3);
      std::snprintf(ratio, sizeof ratio, "%.2fx", total / tensor_total);
      std::printf("%6lld | %-14s | %-20s | %-12s | %-20s | %9s\n", n, r.mode,
                  cell(n, r.gemm_seconds).c_str(), quant, cell(n, total).c_str(), ratio);
    }
  }
  std::printf(
      "GFLOP/s = 2n^3 / time (median ms); time / tensor: (GEMM + quantize) time / that of "
      "tensor-current\n");

  if (device.is_cpu()) {
    std::printf("\n%-6s -> %-6s | %12s | %7s | %10s | %8s\n", "from", "to", "elements", "threads",
                "seconds", "GB/s");
    for (const auto& r : bench_convert(threads > 0 ? threads : omp_get_max_threads())) {
      std::printf("%-6s -> %-6s | %12lld | %7d | %10.6f | %8.2f\n", r.from.c_str(), r.to.c_str(),
                  static_cast<long long>(r.elements), r.threads, r.seconds, r.gb_per_s);
      json.write({{"bench", "convert"},
                  {"device", "cpu"},
                  {"from", r.from},
                  {"to", r.to},
                  {"elements", r.elements},
                  {"threads", r.threads},
                  {"seconds", r.seconds},
                  {"gb_per_s", r.gb_per_s}});
    }
  }
  return 0;
}

// ---- --layer: the GEMMs of one transformer layer -------------------------------

// One linear layer of the block: x [T, in], W [out, in].
struct LayerLinear {
  const char* name;
  int64_t in, out;
};

// The three GEMMs of one linear layer as nn::Linear makes them (linear.cpp): forward y = x Wᵀ,
// dgrad dx = dy W, wgrad dW += dyᵀ x (f32, accumulated). bf16 through the CPU's engine, FP8
// through fp8::gemm on x, W and dy quantized beforehand with the transposed copies a layer makes
// (nn::Linear::transposed_copy): only the GEMMs are timed, not the quantization.
struct LayerTimes {
  double bf16[3];
  std::vector<std::array<double, 3>> fp8;  // per recipe
};

LayerTimes time_linear(Device device, const LayerLinear& l, int64_t t,
                       const std::vector<fp8::Recipe>& recipes, int reps, std::mt19937& rng) {
  Buffer x = random_buffer(device, DType::bf16, t * l.in, rng);
  Buffer w = random_buffer(device, DType::bf16, l.out * l.in, rng);
  Buffer dy = random_buffer(device, DType::bf16, t * l.out, rng);
  Buffer y = Buffer::for_tensor(device, DType::bf16, {t, l.out});
  Buffer dx = Buffer::for_tensor(device, DType::bf16, {t, l.in});
  Buffer dw = random_buffer(device, DType::f32, l.out * l.in, rng);
  const Tensor tx = x.tensor(DType::bf16, {t, l.in}), tw = w.tensor(DType::bf16, {l.out, l.in}),
               tdy = dy.tensor(DType::bf16, {t, l.out}), ty = y.tensor(DType::bf16, {t, l.out}),
               tdx = dx.tensor(DType::bf16, {t, l.in}), tdw = dw.tensor(DType::f32, {l.out, l.in});
  LayerTimes out{};
  {
    kernels::GemmOptions fwd, dgrad, wgrad;
    dgrad.trans_b = false;
    wgrad.trans_a = true;
    wgrad.trans_b = false;
    wgrad.beta = 1.0f;
    const size_t bytes = std::max({kernels::gemm_workspace_bytes(tx, tw, ty, fwd),
                                   kernels::gemm_workspace_bytes(tdy, tw, tdx, dgrad),
                                   kernels::gemm_workspace_bytes(tdy, tx, tdw, wgrad)});
    Buffer workspace(device, std::max<size_t>(bytes, 1));
    for (kernels::GemmOptions* o : {&fwd, &dgrad, &wgrad})
      o->workspace = workspace.view(DType::u8, {static_cast<int64_t>(bytes)});
    out.bf16[0] = median_seconds([&] { kernels::gemm(tx, tw, ty, fwd); }, reps);
    out.bf16[1] = median_seconds([&] { kernels::gemm(tdy, tw, tdx, dgrad); }, reps);
    out.bf16[2] = median_seconds([&] { kernels::gemm(tdy, tx, tdw, wgrad); }, reps);
  }
  for (const fp8::Recipe& recipe : recipes) {
    using fp8::Role;
    fp8::QuantizedTensor qx(device, t, l.in, recipe, Role::activation, true, Tensor(), Tensor(),
                            nn::Linear::transposed_copy(device, recipe, Role::activation));
    fp8::QuantizedTensor qw(device, l.out, l.in, recipe, Role::weight, true, Tensor(), Tensor(),
                            nn::Linear::transposed_copy(device, recipe, Role::weight));
    fp8::QuantizedTensor qdy(device, t, l.out, recipe, Role::gradient, true, Tensor(), Tensor(),
                             nn::Linear::transposed_copy(device, recipe, Role::gradient));
    fp8::quantize(tx, qx, recipe);
    fp8::quantize(tw, qw, recipe);
    fp8::quantize(tdy, qdy, recipe);
    fp8::Fp8GemmOptions fwd, dgrad, wgrad;
    fwd.fast_accum = true;
    wgrad.beta = 1.0f;
    const size_t bytes = std::max(
        {fp8::gemm_workspace_bytes(fp8::as_stored(qx), fp8::as_stored(qw), ty, fwd),
         fp8::gemm_workspace_bytes(fp8::as_stored(qdy), fp8::as_transposed(qw), tdx, dgrad),
         fp8::gemm_workspace_bytes(fp8::as_transposed(qdy), fp8::as_transposed(qx), tdw, wgrad)});
    Buffer workspace(device, std::max<size_t>(bytes, 1));
    for (fp8::Fp8GemmOptions* o : {&fwd, &dgrad, &wgrad})
      o->workspace = workspace.view(DType::u8, {static_cast<int64_t>(bytes)});
    std::array<double, 3> s{};
    s[0] =
        median_seconds([&] { fp8::gemm(fp8::as_stored(qx), fp8::as_stored(qw), ty, fwd); }, reps);
    s[1] = median_seconds(
        [&] { fp8::gemm(fp8::as_stored(qdy), fp8::as_transposed(qw), tdx, dgrad); }, reps);
    s[2] = median_seconds(
        [&] { fp8::gemm(fp8::as_transposed(qdy), fp8::as_transposed(qx), tdw, wgrad); }, reps);
    out.fp8.push_back(s);
  }
  return out;
}

int run_layer(const BenchGemmOptions& args) {
  const Device device = device_from_name(args.device);
  const model::LlamaConfig c = model::load_llama_config(args.layer);
  const int64_t t = args.tokens;
  OCTET_CHECK(t >= 16 && t % 16 == 0, "bench gemm",
              "--tokens must be a positive multiple of 16 (wgrad's K under FP8), got ", t);
  const int reps = args.reps > 0 ? args.reps : 10;
  if (args.threads > 0) omp_set_num_threads(args.threads);
  if (args.impl != "auto") kernels::set_cpu_gemm_engine(args.impl);
  std::vector<fp8::Recipe> recipes;
  for (const std::string& r : args.recipes) recipes.push_back(fp8::Recipe::parse(r));
  const LayerLinear linears[] = {{"qkv", c.hidden_size, c.qkv_size()},
                                 {"o", c.hidden_size, c.hidden_size},
                                 {"gate_up", c.hidden_size, 2 * c.intermediate_size},
                                 {"down", c.intermediate_size, c.hidden_size}};
  JsonLines json(args.json, "bench gemm");
  std::printf(
      "octet bench gemm --layer %s: %s, %d threads, bf16 engine %s, %lld tokens, median of >= %d "
      "calls\nthe GEMMs of one transformer layer as nn::Linear makes them: forward y = x W^T (C "
      "bf16), dgrad dx = dy W (C bf16), wgrad dW += dy^T x (C f32); ms (fp8 / bf16)\n\n",
      args.layer.c_str(), device_name(device).c_str(), omp_get_max_threads(),
      kernels::cpu_gemm_engine(), static_cast<long long>(t), reps);
  std::printf("%-8s %-6s %6s %6s %6s | %9s", "linear", "gemm", "M", "N", "K", "bf16 ms");
  for (const std::string& r : args.recipes) std::printf(" | %-22s", r.c_str());
  std::printf("\n%s\n", std::string(45 + 25 * args.recipes.size(), '-').c_str());
  static const char* kGemms[] = {"fwd", "dgrad", "wgrad"};
  std::mt19937 rng(42);
  double bf16_total = 0.0;
  std::vector<double> fp8_total(recipes.size(), 0.0);
  for (const LayerLinear& l : linears) {
    const LayerTimes lt = time_linear(device, l, t, recipes, reps, rng);
    for (int g = 0; g < 3; ++g) {
      // C [M, N] over K: forward T x out over in, dgrad T x in over out, wgrad out x in over T.
      const int64_t m = g == 2 ? l.out : t, n = g == 0 ? l.out : l.in,
                    k = g == 0 ? l.in : (g == 1 ? l.out : t);
      std::printf("%-8s %-6s %6lld %6lld %6lld | %9.3f", l.name, kGemms[g],
                  static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                  lt.bf16[g] * 1e3);
      bf16_total += lt.bf16[g];
      for (size_t r = 0; r < recipes.size(); ++r) {
        std::printf(" | %9.3f (%5.2fx)      ", lt.fp8[r][g] * 1e3, lt.fp8[r][g] / lt.bf16[g]);
        fp8_total[r] += lt.fp8[r][g];
        json.write({{"bench", "gemm_layer"},
                    {"device", device_name(device)},
                    {"model", args.layer},
                    {"linear", l.name},
                    {"gemm", kGemms[g]},
                    {"m", m},
                    {"n", n},
                    {"k", k},
                    {"threads", omp_get_max_threads()},
                    {"engine", kernels::cpu_gemm_engine()},
                    {"recipe", args.recipes[r]},
                    {"bf16_seconds", lt.bf16[g]},
                    {"fp8_seconds", lt.fp8[r][g]}});
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf("%-8s %-6s %6s %6s %6s | %9.3f", "layer", "all", "", "", "", bf16_total * 1e3);
  for (double total : fp8_total)
    std::printf(" | %9.3f (%5.2fx)      ", total * 1e3, total / bf16_total);
  std::printf(
      "\nfp8 / bf16 above 1: the FP8 GEMM (its operands' widening included, not their "
      "quantization) is slower\n");
  return 0;
}

}  // namespace

void add_bench_gemm(cli::Commands& commands, CLI::App& bench) {
  auto o = std::make_shared<BenchGemmOptions>();
  CLI::App* g =
      commands.add(bench, "gemm", "time the GEMMs and FP8 conversions of one device", [o] {
        if (device_from_name(o->device).is_cuda()) {
          OCTET_CHECK(o->layer.empty(), "bench gemm",
                      "--layer applies to --device cpu; on CUDA --suite llama times LLaMA's "
                      "linear layers");
          return bench_gemm_cuda(*o);
        }
        OCTET_CHECK(!o->max_size_given && !o->suite_given, "bench gemm",
                    "--max-size and --suite apply to --device cuda; on "
                    "the CPU choose sizes with --sizes");
        if (!o->layer.empty()) return run_layer(*o);
        return run(*o);
      });
  g->add_option("--device", o->device, "cpu, cuda or cuda:N")
      ->check(cli::parses_with(device_from_name, "DEVICE"));
  g->add_option("--sizes", o->sizes,
                "square sizes, multiples of 16 (default cpu: 256..4096, cuda: 1024..16384)")
      ->delimiter(',')
      ->check(cli::at_least(1));
  g->add_option("--json", o->json, "also write one JSON record per row to this file");
  g->add_option("--threads", o->threads, "cpu: threads (0: all cores)")->check(cli::at_least(0));
  g->add_option("--reps", o->reps, "timed calls (cpu) or batches (cuda) per cell (0: 10 / 5)")
      ->check(cli::at_least(0));
  g->add_option("--impl", o->impl, "cpu: the GEMM engine")
      ->check(CLI::IsMember({"auto", "onednn", "onednn-f32", "reference"}));
  g->add_option("--layer", o->layer,
                "cpu: time the 12 GEMMs of one transformer layer of this model (tiny, small, 1b, "
                "7b or a config.json) in bf16 and under --recipe, instead of squares");
  g->add_option("--tokens", o->tokens, "--layer: tokens T (batch x seq), a multiple of 16")
      ->check(cli::at_least(16));
  g->add_option("--recipe", o->recipes, "--layer: FP8 recipes, R[,R...]")->delimiter(',');
  CLI::Option* max_size =
      g->add_option("--max-size", o->max_size, "cuda: leave out square sizes above N")
          ->check(cli::at_least(1));
  CLI::Option* suite =
      g->add_option("--suite", o->suites,
                    "cuda: squares, LLaMA-2 7B/13B linear layers (fprop, dgrad, wgrad at 4k and "
                    "16k tokens), Transformer Engine's H200 layer")
          ->delimiter(',')
          ->check(CLI::IsMember({"square", "llama", "te"}));
  g->parse_complete_callback([o, max_size, suite] {
    o->max_size_given = max_size->count() > 0;
    o->suite_given = suite->count() > 0;
  });
}

}  // namespace octet::bench
