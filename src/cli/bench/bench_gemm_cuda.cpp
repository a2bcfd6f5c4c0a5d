// cli/bench/bench_gemm_cuda.cpp: `octet bench gemm --device cuda`: bf16 against FP8 GEMM
// throughput on square sizes, on the linear layers of LLaMA-2 7B and 13B (forward, dgrad
// and wgrad shapes at 4k and 16k tokens) and on Transformer Engine's H200 reference layer;
// FP8 on operands quantized beforehand and with the quantization of both operands
// (tensor-current and tensor-delayed scaling) counted in.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "fp8/gemm.h"
#include "fp8/quantized_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "kernels/gemm.h"

namespace octet::bench {
namespace {

constexpr const char* kOp = "bench gemm";

// Seconds per call of fn: the median over `reps` batches, each enough back-to-back calls
// for ~20 ms and timed between two cuda_synchronize(), after ~0.2 s of warm-up (which also
// makes the cuBLASLt plans and brings the clocks up).
double median_batched_seconds(const std::function<void()>& fn, int reps) {
  fn();
  cuda_synchronize();
  const auto warm_start = std::chrono::steady_clock::now();
  int warm_calls = 0;
  do {
    fn();
    ++warm_calls;
    if (warm_calls % 4 == 0) cuda_synchronize();
  } while (seconds_since(warm_start) < 0.2);
  cuda_synchronize();
  const double per_call = seconds_since(warm_start) / warm_calls;
  const int batch = std::clamp(static_cast<int>(0.02 / per_call), 1, 1000);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) fn();
    cuda_synchronize();
    times.push_back(seconds_since(start) / batch);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Which GEMM of a linear layer Y = X Wᵀ a shape is, which decides the layouts, the FP8
// formats (hybrid: E5M2 gradients) and fast accumulation (forward only), as in nn::Linear.
enum class Kind { square, fprop, dgrad, wgrad };

struct GemmShape {
  std::string suite, name;
  int64_t m, n, k;
  Kind kind;
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::fprop:
      return "fprop";
    case Kind::dgrad:
      return "dgrad";
    case Kind::wgrad:
      return "wgrad";
    default:
      return "square";
  }
}

// The three GEMMs of a linear layer with `in` inputs and `out` outputs over `tokens` rows.
void add_linear(std::vector<GemmShape>& shapes, const std::string& suite, const std::string& name,
                int64_t tokens, int64_t in, int64_t out) {
  const std::string base = name + " T=" + std::to_string(tokens) + " ";
  shapes.push_back({suite, base + "fprop", tokens, out, in, Kind::fprop});  // Y = X Wᵀ
  shapes.push_back({suite, base + "dgrad", tokens, in, out, Kind::dgrad});  // dX = dY W
  shapes.push_back({suite, base + "wgrad", out, in, tokens, Kind::wgrad});  // dW = dYᵀ X
}

struct Model {
  const char* name;
  int64_t hidden, ffn;
};
constexpr Model kLlama[] = {{"llama2-7b", 4096, 11008}, {"llama2-13b", 5120, 13824}};
// Transformer Engine's H200 FP8 benchmark layer: hidden 4096, FFN 16384, 15872 tokens.
constexpr int64_t kTeHidden = 4096, kTeFfn = 16384, kTeTokens = 15872;

std::vector<GemmShape> make_shapes(const std::vector<std::string>& suites,
                                   const std::vector<long long>& sizes) {
  std::vector<GemmShape> shapes;
  auto wanted = [&](const char* s) {
    return std::find(suites.begin(), suites.end(), s) != suites.end();
  };
  if (wanted("square")) {
    for (long long n : sizes)
      shapes.push_back({"square", "n=" + std::to_string(n), n, n, n, Kind::square});
  }
  if (wanted("llama")) {
    for (const Model& m : kLlama) {
      for (int64_t tokens : {int64_t{4096}, int64_t{16384}}) {
        add_linear(shapes, m.name, "qkv", tokens, m.hidden, 3 * m.hidden);
        add_linear(shapes, m.name, "out", tokens, m.hidden, m.hidden);
        add_linear(shapes, m.name, "gate_up", tokens, m.hidden, 2 * m.ffn);
        add_linear(shapes, m.name, "down", tokens, m.ffn, m.hidden);
      }
    }
  }
  if (wanted("te")) {
    add_linear(shapes, "te-h200", "fc1", kTeTokens, kTeHidden, kTeFfn);
    add_linear(shapes, "te-h200", "fc2", kTeTokens, kTeFfn, kTeHidden);
  }
  return shapes;
}

double tflops(double flops, double seconds) {
  return flops / seconds * 1e-12;
}

// Device memory every shape takes views of: bf16 random values in [-1, 1) for A and B
// (made once on the host, then replicated on the device), and room for C.
struct Pools {
  Buffer a, b, c;
};

void fill_random_bf16(const Buffer& buf, uint64_t seed) {
  const size_t elems = buf.bytes() / 2;
  std::vector<uint16_t> host(std::min<size_t>(elems, size_t{1} << 22));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (uint16_t& v : host) v = f32_to_bf16(uniform(rng));
  const Device device = buf.device();
  copy_bytes(buf.data(), device, host.data(), Device::cpu(), host.size() * 2);
  auto* p = static_cast<char*>(buf.data());
  for (size_t done = host.size() * 2; done < elems * 2;) {
    const size_t n = std::min(done, elems * 2 - done);
    copy_bytes(p + done, device, p, device, n);
    done += n;
  }
}

fp8::Role role_a(Kind k) {
  return k == Kind::dgrad || k == Kind::wgrad ? fp8::Role::gradient : fp8::Role::activation;
}
fp8::Role role_b(Kind k) {
  return k == Kind::wgrad ? fp8::Role::activation : fp8::Role::weight;
}

struct Timings {
  double bf16 = 0, fp8 = 0;                  // GEMM only
  double current = 0, current_quantize = 0;  // GEMM + quantize, quantize alone
  double delayed = 0, delayed_quantize = 0;
  DType a8 = DType::e4m3, b8 = DType::e4m3;
};

Tensor workspace_for(Buffer& buf, Device device, size_t bytes) {
  if (buf.bytes() < bytes) buf = Buffer(device, bytes);
  return buf.view(DType::u8, {static_cast<int64_t>(buf.bytes())});
}

Timings time_shape(Device device, const GemmShape& s, const Pools& pools, Buffer& workspace,
                   int reps) {
  Timings t;
  const bool wgrad = s.kind == Kind::wgrad;
  const DType out = wgrad ? DType::f32 : DType::bf16;  // dW accumulates in f32
  const float beta = wgrad ? 1.0f : 0.0f;
  const Tensor c = pools.c.view(out, {s.m, s.n});
  zero_bytes(c.data, device, c.nbytes());

  // bf16 in nn::Linear's layouts: fprop A [M, K] B [N, K]; dgrad B = W stored [K, N];
  // wgrad A = dY stored [K, M], B = X stored [K, N].
  kernels::GemmOptions o16;
  o16.beta = beta;
  o16.trans_a = wgrad;
  o16.trans_b = s.kind == Kind::square || s.kind == Kind::fprop;
  const Tensor a16 = pools.a.view(DType::bf16, o16.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k});
  const Tensor b16 = pools.b.view(DType::bf16, o16.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n});
  o16.workspace = workspace_for(workspace, device, kernels::gemm_workspace_bytes(a16, b16, c, o16));
  t.bf16 = median_batched_seconds([&] { kernels::gemm(a16, b16, c, o16); }, reps);

  // FP8: both operands K-major, quantized from bf16 [M, K] and [N, K].
  const Tensor a_src = pools.a.view(DType::bf16, {s.m, s.k});
  const Tensor b_src = pools.b.view(DType::bf16, {s.n, s.k});
  for (const char* mode : {"tensor-current", "tensor-delayed"}) {
    const fp8::Recipe recipe = fp8::Recipe::parse(mode);
    const bool delayed = recipe.mode == fp8::ScalingMode::tensor_delayed;
    fp8::QuantizedTensor qa(device, s.m, s.k, recipe, role_a(s.kind), false);
    fp8::QuantizedTensor qb(device, s.n, s.k, recipe, role_b(s.kind), false);
    t.a8 = qa.format();
    t.b8 = qb.format();
    fp8::DelayedScalingState state;
    if (delayed)
      state = fp8::DelayedScalingState(device, recipe.delayed, {qa.format(), qb.format()});
    fp8::DelayedScalingState* st = delayed ? &state : nullptr;
    auto quantize_both = [&] {
      fp8::quantize(a_src, qa, recipe, st, delayed ? 0 : -1);
      fp8::quantize(b_src, qb, recipe, st, delayed ? 1 : -1);
    };
    quantize_both();
    if (delayed) {
      state.update();  // scales from this data's amax, as from the second step on
      quantize_both();
    }
    fp8::Fp8GemmOptions o8;
    o8.beta = beta;
    o8.fast_accum = s.kind == Kind::square || s.kind == Kind::fprop;
    const fp8::Fp8Operand a = fp8::as_stored(qa), b = fp8::as_stored(qb);
    o8.workspace = workspace_for(workspace, device, fp8::gemm_workspace_bytes(a, b, c, o8));
    auto gemm = [&] { fp8::gemm(a, b, c, o8); };
    const double quantize = median_batched_seconds(quantize_both, reps);
    const double with = median_batched_seconds(
        [&] {
          quantize_both();
          gemm();
        },
        reps);
    if (delayed) {
      t.delayed = with;
      t.delayed_quantize = quantize;
    } else {
      t.fp8 = median_batched_seconds(gemm, reps);
      t.current = with;
      t.current_quantize = quantize;
    }
  }
  return t;
}

// Transformer Engine's layer, fc1 and fc2 forward and backward, as nn::Linear runs them:
// bf16 (three GEMMs per linear), and FP8 with tensor-current scaling where X, W and dY are
// each quantized once with their transposed copies, then the three FP8 GEMMs.
struct LayerTimings {
  double flops = 0, bf16 = 0, fp8 = 0;
};

LayerTimings time_te_layer(Device device, const Pools& pools, Buffer& workspace, int reps) {
  struct Linear {
    int64_t in, out;
  };
  const Linear linears[] = {{kTeHidden, kTeFfn}, {kTeFfn, kTeHidden}};
  const int64_t t = kTeTokens;
  const fp8::Recipe recipe = fp8::Recipe::parse("tensor-current");
  LayerTimings lt;
  std::vector<std::function<void()>> bf16_steps, fp8_steps;
  std::vector<std::unique_ptr<fp8::QuantizedTensor>> keep;
  size_t c_offset = 0;
  auto c_view = [&](DType dtype, int64_t rows, int64_t cols) {
    const Tensor v = pools.c.view(dtype, {rows, cols}, c_offset);
    c_offset += (static_cast<size_t>(rows * cols) * dtype_size(dtype) + 255) / 256 * 256;
    return v;
  };
  size_t ws_bytes = 0;
  for (const Linear& l : linears) {
    lt.flops += 3 * 2.0 * t * l.in * l.out;
    const Tensor x = pools.a.view(DType::bf16, {t, l.in});
    const Tensor dy = pools.a.view(DType::bf16, {t, l.out});
    const Tensor w = pools.b.view(DType::bf16, {l.out, l.in});
    const Tensor y = c_view(DType::bf16, t, l.out), dx = c_view(DType::bf16, t, l.in);
    const Tensor dw = c_view(DType::f32, l.out, l.in);
    zero_bytes(dw.data, device, dw.nbytes());
    kernels::GemmOptions fwd, dgrad, wgrad;
    dgrad.trans_b = false;
    wgrad.trans_a = true;
    wgrad.trans_b = false;
    wgrad.beta = 1.0f;
    ws_bytes = std::max({ws_bytes, kernels::gemm_workspace_bytes(x, w, y, fwd),
                         kernels::gemm_workspace_bytes(dy, w, dx, dgrad),
                         kernels::gemm_workspace_bytes(dy, x, dw, wgrad)});
    bf16_steps.push_back([=, &workspace] {
      kernels::GemmOptions f = fwd, d = dgrad, g = wgrad;
      f.workspace = d.workspace = g.workspace =
          workspace.view(DType::u8, {static_cast<int64_t>(workspace.bytes())});
      kernels::gemm(x, w, y, f);
      kernels::gemm(dy, w, dx, d);
      kernels::gemm(dy, x, dw, g);
    });
    keep.push_back(std::make_unique<fp8::QuantizedTensor>(device, t, l.in, recipe,
                                                          fp8::Role::activation, true));
    fp8::QuantizedTensor* qx = keep.back().get();
    keep.push_back(std::make_unique<fp8::QuantizedTensor>(device, l.out, l.in, recipe,
                                                          fp8::Role::weight, true));
    fp8::QuantizedTensor* qw = keep.back().get();
    keep.push_back(std::make_unique<fp8::QuantizedTensor>(device, t, l.out, recipe,
                                                          fp8::Role::gradient, true));
    fp8::QuantizedTensor* qdy = keep.back().get();
    fp8::Fp8GemmOptions probe;
    ws_bytes = std::max(
        {ws_bytes, fp8::gemm_workspace_bytes(fp8::as_stored(*qx), fp8::as_stored(*qw), y, probe),
         fp8::gemm_workspace_bytes(fp8::as_stored(*qdy), fp8::as_transposed(*qw), dx, probe),
         fp8::gemm_workspace_bytes(fp8::as_transposed(*qdy), fp8::as_transposed(*qx), dw, probe)});
    fp8_steps.push_back([=, &workspace] {
      fp8::quantize(x, *qx, recipe);
      fp8::quantize(w, *qw, recipe);
      fp8::quantize(dy, *qdy, recipe);
      fp8::Fp8GemmOptions o;
      o.workspace = workspace.view(DType::u8, {static_cast<int64_t>(workspace.bytes())});
      o.fast_accum = true;
      fp8::gemm(fp8::as_stored(*qx), fp8::as_stored(*qw), y, o);
      o.fast_accum = false;
      fp8::gemm(fp8::as_stored(*qdy), fp8::as_transposed(*qw), dx, o);
      o.beta = 1.0f;
      fp8::gemm(fp8::as_transposed(*qdy), fp8::as_transposed(*qx), dw, o);
    });
  }
  workspace_for(workspace, device, ws_bytes);
  lt.bf16 = median_batched_seconds(
      [&] {
        for (auto& step : bf16_steps) step();
      },
      reps);
  lt.fp8 = median_batched_seconds(
      [&] {
        for (auto& step : fp8_steps) step();
      },
      reps);
  return lt;
}

Json json_record(Device device, const GemmShape& s, const char* dtype, DType a, DType b, DType out,
                 const char* mode, bool fast_accum, double seconds, double quantize_seconds,
                 double bf16_seconds) {
  const double flops = 2.0 * s.m * s.n * s.k;
  return {{"bench", "gemm"},
          {"device", device_name(device)},
          {"impl", "cublaslt"},
          {"suite", s.suite},
          {"shape", s.name},
          {"gemm", kind_name(s.kind)},
          {"m", s.m},
          {"n", s.n},
          {"k", s.k},
          {"dtype", dtype},
          {"a", dtype_name(a)},
          {"b", dtype_name(b)},
          {"out", dtype_name(out)},
          {"mode", mode},
          {"fast_accum", fast_accum},
          {"seconds", seconds},
          {"quantize_seconds", quantize_seconds},
          {"tflops", tflops(flops, seconds)},
          {"gflops", flops / seconds * 1e-9},
          {"speedup_vs_bf16", bf16_seconds / seconds}};
}

}  // namespace

int bench_gemm_cuda(const BenchGemmOptions& args) {
  const Device device = device_from_name(args.device);
  OCTET_CHECK(cuda_compiled(), kOp,
              "this octet was built without CUDA; reconfigure where nvcc is found");
  OCTET_CHECK(device.index < cuda_device_count(), kOp, device_name(device),
              " is not available: this machine has ", cuda_device_count(), " usable GPU(s)");
  std::vector<long long> sizes;
  for (long long n :
       args.sizes.empty() ? std::vector<long long>{1024, 2048, 4096, 8192, 16384} : args.sizes)
    if (n <= args.max_size) sizes.push_back(n);
  for (long long n : sizes)
    OCTET_CHECK(n >= 16 && n % 16 == 0, kOp,
                "sizes must be multiples of 16 (FP8 needs K % 16 == 0), got ", n);
  const int reps = args.reps > 0 ? args.reps : 5;
  const std::vector<std::string>& suites = args.suites;
  JsonLines json(args.json, kOp);
  const std::vector<GemmShape> shapes = make_shapes(suites, sizes);
  const bool te = std::find(suites.begin(), suites.end(), "te") != suites.end();

  // Pools big enough for every shape (and, for the TE layer, X, dY, W and the outputs).
  size_t a_elems = 0, b_elems = 0, c_bytes = 0;
  for (const GemmShape& s : shapes) {
    a_elems = std::max<size_t>(a_elems, s.m * s.k);
    b_elems = std::max<size_t>(b_elems, s.n * s.k);
    c_bytes = std::max<size_t>(c_bytes, s.m * s.n * (s.kind == Kind::wgrad ? 4 : 2));
  }
  if (te)
    c_bytes = std::max<size_t>(
        c_bytes, 2 * (2 * kTeTokens * (kTeHidden + kTeFfn) + 4 * kTeHidden * kTeFfn) + 6 * 256);
  Pools pools{Buffer(device, std::max<size_t>(a_elems, 1) * 2),
              Buffer(device, std::max<size_t>(b_elems, 1) * 2),
              Buffer(device, std::max<size_t>(c_bytes, 1))};
  fill_random_bf16(pools.a, 1);
  fill_random_bf16(pools.b, 2);
  Buffer workspace;

  std::printf(
      "octet bench gemm: %s, cuBLASLt, median of %d batches (~20 ms each) after a 0.2 s warm-up\n",
      device_name(device).c_str(), reps);
  std::printf(
      "TFLOP/s = 2MNK / time per GEMM. bf16: bf16 x bf16 in nn::Linear's layouts; fp8: E4M3 (E5M2 "
      "gradients) K-major,\n"
      "per-tensor scales, fast accumulation on fprop only; +quant: fp8::quantize of both operands "
      "from bf16 every call\n"
      "(in a training step the weight is quantized once per step); (x) = speedup over bf16. wgrad "
      "accumulates into f32.\n\n");
  std::printf("%-11s %-24s %6s %6s %6s | %8s | %15s | %15s | %15s\n", "suite", "shape", "M", "N",
              "K", "bf16", "fp8", "fp8+quant cur", "fp8+quant del");
  std::printf("%s\n", std::string(128, '-').c_str());
  int failures = 0;
  for (const GemmShape& s : shapes) {
    Timings t;
    try {
      t = time_shape(device, s, pools, workspace, reps);
    } catch (const Error& e) {
      std::printf("%-11s %-24s %6lld %6lld %6lld | error: %s\n", s.suite.c_str(), s.name.c_str(),
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), e.what());
      ++failures;
      continue;
    }
    const double flops = 2.0 * s.m * s.n * s.k;
    auto cell = [&](double seconds) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%7.1f (%4.2fx)", tflops(flops, seconds), t.bf16 / seconds);
      return std::string(buf);
    };
    std::printf("%-11s %-24s %6lld %6lld %6lld | %8.1f | %15s | %15s | %15s\n", s.suite.c_str(),
                s.name.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), tflops(flops, t.bf16), cell(t.fp8).c_str(),
                cell(t.current).c_str(), cell(t.delayed).c_str());
    std::fflush(stdout);
    if (json.is_open()) {
      const bool wgrad = s.kind == Kind::wgrad,
                 fast = s.kind == Kind::square || s.kind == Kind::fprop;
      const DType out = wgrad ? DType::f32 : DType::bf16;
      json.write(json_record(device, s, "bf16", DType::bf16, DType::bf16, out, "none", false,
                             t.bf16, 0, t.bf16));
      json.write(
          json_record(device, s, "fp8", t.a8, t.b8, out, "prequantized", fast, t.fp8, 0, t.bf16));
      json.write(json_record(device, s, "fp8", t.a8, t.b8, out, "tensor-current", fast, t.current,
                             t.current_quantize, t.bf16));
      json.write(json_record(device, s, "fp8", t.a8, t.b8, out, "tensor-delayed", fast, t.delayed,
                             t.delayed_quantize, t.bf16));
    }
  }
  if (te) {
    try {
      const LayerTimings lt = time_te_layer(device, pools, workspace, reps);
      std::printf(
          "\nTransformer Engine's H200 reference layer (hidden %lld, FFN %lld, %lld tokens): fc1 "
          "and fc2, forward and\n"
          "backward (6 GEMMs); FP8 = tensor-current, X, W and dY quantized once each with their "
          "transposed copies\n"
          "  bf16 %8.3f ms %7.1f TFLOP/s | fp8 incl. quantization %8.3f ms %7.1f TFLOP/s | speedup "
          "%.2fx\n",
          static_cast<long long>(kTeHidden), static_cast<long long>(kTeFfn),
          static_cast<long long>(kTeTokens), lt.bf16 * 1e3, tflops(lt.flops, lt.bf16), lt.fp8 * 1e3,
          tflops(lt.flops, lt.fp8), lt.bf16 / lt.fp8);
      json.write({{"bench", "gemm"},
                  {"device", device_name(device)},
                  {"impl", "cublaslt"},
                  {"suite", "te-h200"},
                  {"shape", "layer fc1+fc2 fwd+bwd"},
                  {"gemm", "layer"},
                  {"tokens", kTeTokens},
                  {"hidden", kTeHidden},
                  {"ffn", kTeFfn},
                  {"flops", lt.flops},
                  {"bf16_seconds", lt.bf16},
                  {"fp8_seconds", lt.fp8},
                  {"bf16_tflops", tflops(lt.flops, lt.bf16)},
                  {"fp8_tflops", tflops(lt.flops, lt.fp8)},
                  {"speedup_vs_bf16", lt.bf16 / lt.fp8},
                  {"mode", "tensor-current"}});
    } catch (const Error& e) {
      std::printf("\nTransformer Engine reference layer: error: %s\n", e.what());
      ++failures;
    }
  }
  if (failures > 0) std::printf("\n%d benchmark(s) failed\n", failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace octet::bench
