// cli/bench/bench_attention.cpp: `octet bench attention`: times the causal GQA attention
// forward pass, backward pass and both on one device, in TFLOP/s of the causal FLOPs
// (forward 4 B S^2 Hq hd / 2: two S x S x hd products over half of the score matrix;
// backward 2.5x that: five products), on LLaMA-like shapes. bench/torch_attention.py
// times torch's scaled_dot_product_attention on the same shapes and reads our --json.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "kernels/attention.h"

namespace octet::bench {
namespace {

struct Shape5 {
  long long batch, seq_len, n_heads, n_kv_heads, head_dim;
  std::string str() const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "B=%lld S=%lld Hq=%lld Hkv=%lld hd=%lld", batch, seq_len,
                  n_heads, n_kv_heads, head_dim);
    return buf;
  }
  // Causal forward FLOPs: q k^T and p v, 2 S^2 hd each per head, over half the scores.
  double forward_flops() const {
    return 4.0 * batch * seq_len * seq_len * n_heads * head_dim / 2.0;
  }
};

// 16k tokens per shape, as a training step of LLaMA-7B/8B-like layers sees them.
const Shape5 kDefaultShapes[] = {
    {8, 2048, 32, 8, 128}, {8, 2048, 32, 32, 128}, {2, 8192, 32, 8, 128}, {2, 8192, 32, 32, 128},
    {8, 2048, 32, 8, 64},  {8, 2048, 32, 32, 64},  {2, 8192, 32, 8, 64},  {2, 8192, 32, 32, 64}};

// "8x2048x32x8x128,2x8192x32x32x64": B x S x Hq x Hkv x hd per shape.
std::vector<Shape5> parse_attention_shapes(const std::string& text) {
  std::vector<Shape5> shapes;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    Shape5 s{};
    char x[4];
    const int n =
        std::sscanf(item.c_str(), "%lld%c%lld%c%lld%c%lld%c%lld", &s.batch, &x[0], &s.seq_len,
                    &x[1], &s.n_heads, &x[2], &s.n_kv_heads, &x[3], &s.head_dim);
    OCTET_CHECK(n == 9 && s.batch > 0 && s.seq_len > 0 && s.n_heads > 0 && s.n_kv_heads > 0 &&
                    s.head_dim > 0 && s.n_heads % s.n_kv_heads == 0,
                "bench attention", "--shapes takes BxSxHqxHkvxhd items (Hq a multiple of Hkv), ",
                "e.g. 8x2048x32x8x128; got '", item, "'");
    shapes.push_back(s);
  }
  return shapes;
}

// The median of at least `reps` calls (more for short ones, up to ~0.2 s of them) after
// a warm-up of at least 0.25 s, each call synchronised.
double median_attention_seconds(const std::function<void()>& fn, int reps) {
  return median_call_seconds(fn, reps, 100, 0.2);
}

struct Timing {
  double forward, backward, both;  // seconds
};

Timing time_attention_shape(Device device, DType dtype, const Shape5& s, int reps) {
  const int64_t tokens = s.batch * s.seq_len;
  const int64_t width = (s.n_heads + 2 * s.n_kv_heads) * s.head_dim;
  const int64_t out_width = s.n_heads * s.head_dim;
  std::mt19937 rng(42);
  const Buffer qkv_buf = random_buffer(device, dtype, tokens * width, rng);
  const Buffer dout_buf = random_buffer(device, dtype, tokens * out_width, rng);
  const Buffer out_buf = Buffer::for_tensor(device, dtype, {tokens, out_width});
  const Buffer dqkv_buf = Buffer::for_tensor(device, dtype, {tokens, width});
  const Buffer lse_buf = Buffer::for_tensor(device, DType::f32, {s.batch, s.n_heads, s.seq_len});
  Buffer ws_buf;
  Tensor ws;
  if (device.is_cpu()) {
    const size_t bytes = kernels::attention_workspace_bytes(s.seq_len, s.head_dim);
    ws_buf = Buffer(device, bytes);
    ws = ws_buf.view(DType::u8, {static_cast<int64_t>(bytes)});
  }
  const Tensor qkv = qkv_buf.tensor(dtype, {tokens, width});
  const Tensor dout = dout_buf.tensor(dtype, {tokens, out_width});
  const Tensor out = out_buf.tensor(dtype, {tokens, out_width});
  const Tensor dqkv = dqkv_buf.tensor(dtype, {tokens, width});
  const Tensor lse = lse_buf.tensor(DType::f32, {s.batch, s.n_heads, s.seq_len});
  auto forward = [&] {
    kernels::attention_forward(qkv, out, lse, s.batch, s.seq_len, s.n_heads, s.n_kv_heads,
                               s.head_dim, ws);
  };
  auto backward = [&] {
    kernels::attention_backward(dout, qkv, out, lse, dqkv, s.batch, s.seq_len, s.n_heads,
                                s.n_kv_heads, s.head_dim, ws);
  };
  Timing t{};
  t.forward = median_attention_seconds(forward, reps);
  t.backward = median_attention_seconds(backward, reps);  // on the forward's out and lse
  t.both = median_attention_seconds(
      [&] {
        forward();
        backward();
      },
      reps);
  return t;
}

struct AttentionOptions {
  std::string device = "cuda";
  std::string dtype = "bf16";
  std::vector<Shape5> shapes;  // empty: kDefaultShapes
  int reps = 10;
  std::string json;
};

int run_attention(const AttentionOptions& args) {
  const Device device = device_from_name(args.device);
  const DType dtype = args.dtype == "bf16" ? DType::bf16 : DType::f32;
  const int reps = args.reps;
  const std::vector<Shape5> shapes =
      !args.shapes.empty()
          ? args.shapes
          : std::vector<Shape5>(std::begin(kDefaultShapes), std::end(kDefaultShapes));
  if (device.is_cpu() && args.shapes.empty()) {
    std::fprintf(stderr,
                 "octet bench attention: the default shapes take minutes per call on a CPU; "
                 "pass --shapes (e.g. 1x512x8x2x64)\n");
    return 1;
  }
  JsonLines json(args.json, "bench attention");
  std::printf(
      "octet bench attention: %s, %s, causal, median of >= %d calls after a 0.25 s warm-up\n",
      device_name(device).c_str(), dtype_name(dtype), reps);
  std::printf("TFLOP/s of the causal FLOPs: forward 4 B S^2 Hq hd / 2, backward 2.5x forward\n\n");
  std::printf("%-38s | %-20s | %-20s | %-20s\n", "shape", "forward", "backward",
              "forward+backward");
  std::printf("%s\n", std::string(106, '-').c_str());
  auto cell = [](double flops, double seconds) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%7.2f (%8.3f ms)", flops / seconds * 1e-12, seconds * 1e3);
    return std::string(buf);
  };
  for (const Shape5& s : shapes) {
    const Timing t = time_attention_shape(device, dtype, s, reps);
    const double f = s.forward_flops(), b = 2.5 * f;
    std::printf("%-38s | %-20s | %-20s | %-20s\n", s.str().c_str(), cell(f, t.forward).c_str(),
                cell(b, t.backward).c_str(), cell(f + b, t.both).c_str());
    std::fflush(stdout);
    json.write({{"bench", "attention"},
                {"device", device_name(device)},
                {"dtype", dtype_name(dtype)},
                {"batch", s.batch},
                {"seq_len", s.seq_len},
                {"n_heads", s.n_heads},
                {"n_kv_heads", s.n_kv_heads},
                {"head_dim", s.head_dim},
                {"fwd_seconds", t.forward},
                {"bwd_seconds", t.backward},
                {"fwd_bwd_seconds", t.both},
                {"fwd_tflops", f / t.forward * 1e-12},
                {"bwd_tflops", b / t.backward * 1e-12},
                {"fwd_bwd_tflops", (f + b) / t.both * 1e-12}});
  }
  return 0;
}

}  // namespace

void add_bench_attention(cli::Commands& commands, CLI::App& bench) {
  auto o = std::make_shared<AttentionOptions>();
  CLI::App* a =
      commands.add(bench, "attention",
                   "time causal GQA attention forward, backward and both (TFLOP/s); "
                   "bench/torch_attention.py --ours FILE compares torch with the --json records",
                   [o] { return run_attention(*o); });
  a->add_option("--device", o->device, "cuda, cuda:N or cpu")
      ->check(cli::parses_with(device_from_name, "DEVICE"));
  a->add_option("--dtype", o->dtype, "the dtype of q, k, v and the output")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cli::add_parsed(*a, "--shapes", o->shapes, parse_attention_shapes,
                  "BxSxHqxHkvxhd,... (default 16k tokens: B=8 S=2048 and B=2 S=8192, Hq=32, "
                  "Hkv=8 and 32, hd=128 and 64)");
  a->add_option("--reps", o->reps, "timed calls per cell, at least")->check(cli::at_least(1));
  a->add_option("--json", o->json, "also write one JSON record per shape to this file");
}

}  // namespace octet::bench
