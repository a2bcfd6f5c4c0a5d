// cli/bench/bench_quantize.cpp: `octet bench quantize`: the bytes per second of each FP8
// quantize variant (every scale grid, with and without the transposed copy) on one
// device, next to what a plain copy of the input achieves there.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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
#include "kernels/quantize.h"

namespace octet::bench {
namespace {

constexpr const char* kQuantizeOp = "bench quantize";

// Each timed call works on the next of several copies of inputs and outputs, enough
// of them (>= kRotateBytes in all) that none is still in a cache (the H200's L2 is 50
// MB) when its turn comes again: what is timed is traffic to memory.
constexpr size_t kRotateBytes = size_t{512} << 20;
constexpr int kMaxSets = 16;

struct Variant {
  const char* name;
  kernels::ScaleGrid grid;
  bool given;  // tensor-delayed: a given scale, no amax pass
};

const Variant kVariants[] = {{"tensor-current", {0, 0, false}, false},
                             {"tensor-delayed", {0, 0, false}, true},
                             {"row", {1, 0, false}, false},
                             {"block-1x128", {1, 128, false}, false},
                             {"block-128x128", {128, 128, false}, false},
                             {"mx-1x32", {1, 32, true}, false}};

// Seconds per call of fn(set): the median over `reps` batches of back-to-back calls
// (>= 5 ms and >= one call per set each, one synchronisation per batch, so launch
// latency overlaps the previous call as in a training step), after a warm-up batch.
double seconds_per_call(const std::function<void(int)>& fn, int sets, int reps) {
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < sets; ++s) fn(s);
  cuda_synchronize();
  const double one = seconds_since(start) / sets;
  const int calls = std::max(sets, std::min(5000, static_cast<int>(0.005 / std::max(one, 1e-9))));
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn(i % sets);
    cuda_synchronize();
    times.push_back(seconds_since(start) / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

size_t scale_bytes(int64_t rows, int64_t cols, kernels::ScaleGrid grid) {
  return static_cast<size_t>(kernels::scale_grid_shape(rows, cols, grid).numel()) *
         (grid.e8m0 ? 1 : 4);
}

// One copy of everything a call touches.
struct Set {
  Buffer x, data, data_t, scale_inv, scale_inv_t, small, copy_dst;
};

struct Shape2 {
  int64_t rows, cols;
};

std::vector<Shape2> parse_quantize_shapes(const std::string& text) {
  std::vector<Shape2> shapes;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const size_t x = item.find('x');
    long long rows = 0, cols = 0;
    OCTET_CHECK(
        x != std::string::npos && std::sscanf(item.c_str(), "%lldx%lld", &rows, &cols) == 2 &&
            rows > 0 && cols > 0,
        kQuantizeOp, "--shapes takes ROWSxCOLS[,ROWSxCOLS...], e.g. 4096x4096; got '", item, "'");
    shapes.push_back({rows, cols});
    begin = end + 1;
  }
  return shapes;
}

// n values of x in `dtype`: normal, a random 1x32 block scaled by 2^k, so scales differ.
std::vector<uint8_t> random_input(int64_t n, DType dtype) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * size);
  // A pattern of 1 Mi values repeated: generating hundreds of millions costs seconds.
  const int64_t pattern = std::min<int64_t>(n, int64_t{1} << 20);
  for (int64_t i = 0; i < pattern; ++i) {
    const float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / 32 % 16) - 8);
    if (dtype == DType::bf16) {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(&bytes[i * 2], &b, 2);
    } else {
      std::memcpy(&bytes[i * 4], &v, 4);
    }
  }
  for (int64_t i = pattern; i < n; i += pattern) {
    std::memcpy(&bytes[i * size], bytes.data(),
                static_cast<size_t>(std::min(pattern, n - i)) * size);
  }
  return bytes;
}

// A copy of `bytes` bytes: copy_bytes (cudaMemcpyAsync device to device on the
// stream) on a GPU; on the CPU copy_bytes (memcpy) in one chunk per thread.
void copy_on(Device device, void* dst, const void* src, size_t bytes) {
  if (device.is_cuda()) {
    copy_bytes(dst, device, src, device, bytes);
    return;
  }
  const int chunks = omp_get_max_threads();
  const size_t chunk = (bytes + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) if (bytes > (size_t{1} << 20))
  for (int c = 0; c < chunks; ++c) {
    const size_t begin = std::min(bytes, chunk * c), end = std::min(bytes, begin + chunk);
    copy_bytes(static_cast<char*>(dst) + begin, device, static_cast<const char*>(src) + begin,
               device, end - begin);
  }
}

struct QuantizeOptions {
  std::string device = "cpu";
  std::vector<Shape2> shapes;  // empty: the device's default list
  int reps = 10;
  std::string input = "bf16";
  std::string fp8 = "e4m3";
  bool counts = false;
  std::string json;
};

int run_quantize(const QuantizeOptions& args) {
  const Device device = device_from_name(args.device);
  const std::vector<Shape2> shapes =
      !args.shapes.empty() ? args.shapes
      : device.is_cuda()   ? parse_quantize_shapes("4096x4096,8192x8192,15872x4096,16384x16384")
                           : parse_quantize_shapes("1024x1024,2048x2048,3968x1024");
  const int reps = args.reps;
  const DType in = args.input == "bf16" ? DType::bf16 : DType::f32;
  const DType fp8 = dtype_from_name(args.fp8);
  const bool counts = args.counts;
  JsonLines json(args.json, kQuantizeOp);

  std::printf("octet bench quantize: %s, %s -> %s, amax output%s, median of %d batches\n",
              device_name(device).c_str(), dtype_name(in), dtype_name(fp8),
              counts ? " and counts" : "", reps);
  std::printf(
      "bytes = x read once + data (+ data_t) + scale_inv (+ scale_inv_t) written: what any\n"
      "implementation must move (a second read of x, see x reads, is not counted). copy = a\n"
      "%s of x, read + write counted. Calls rotate over copies of x and the outputs\n"
      "(up to %zu MiB in %d copies) so that little comes from caches.\n\n",
      device.is_cuda() ? "cudaMemcpyAsync device to device" : "parallel memcpy", kRotateBytes >> 20,
      kMaxSets);
  std::printf("%-13s | %-16s | %-3s | %10s | %10s | %9s | %7s | %8s\n", "shape", "variant", "T",
              "MB", "us", "GB/s", "of copy", "x reads");
  std::printf("%s\n", std::string(97, '-').c_str());

  for (const Shape2& shape : shapes) {
    const int64_t rows = shape.rows, cols = shape.cols, n = rows * cols;
    const size_t in_bytes = static_cast<size_t>(n) * dtype_size(in);
    size_t scale_max = 0, scale_t_max = 0;
    for (const Variant& v : kVariants) {
      scale_max = std::max(scale_max, scale_bytes(rows, cols, v.grid));
      scale_t_max = std::max(scale_t_max, scale_bytes(cols, rows, v.grid));
    }
    const size_t set_bytes = 2 * in_bytes + 2 * static_cast<size_t>(n) + scale_max + scale_t_max;
    const int sets = static_cast<int>(
        std::clamp<size_t>((kRotateBytes + set_bytes - 1) / set_bytes, 1, kMaxSets));
    const std::vector<uint8_t> host = random_input(n, in);
    std::vector<Set> s(static_cast<size_t>(sets));
    const float given = 1.0f;
    for (Set& set : s) {
      set.x = Buffer(device, in_bytes);
      copy_bytes(set.x.data(), device, host.data(), Device::cpu(), in_bytes);
      set.data = Buffer(device, static_cast<size_t>(n));
      set.data_t = Buffer(device, static_cast<size_t>(n));
      set.scale_inv = Buffer(device, scale_max);
      set.scale_inv_t = Buffer(device, scale_t_max);
      set.small = Buffer(device, 64);
      copy_bytes(set.small.data(), device, &given, Device::cpu(), 4);
      set.copy_dst = Buffer(device, in_bytes);
    }
    cuda_synchronize();

    const double copy_seconds = seconds_per_call(
        [&](int i) { copy_on(device, s[i].copy_dst.data(), s[i].x.data(), in_bytes); }, sets, reps);
    const double copy_gbs = 2.0 * static_cast<double>(in_bytes) / copy_seconds * 1e-9;
    char shape_name[32];
    std::snprintf(shape_name, sizeof shape_name, "%lldx%lld", static_cast<long long>(rows),
                  static_cast<long long>(cols));
    std::printf("%-13s | %-16s | %-3s | %10.1f | %10.1f | %9.1f | %7s | %8s\n", shape_name, "copy",
                "", 2.0 * static_cast<double>(in_bytes) * 1e-6, copy_seconds * 1e6, copy_gbs,
                "1.00", "1");

    for (const Variant& v : kVariants) {
      // The transposed copy K-major (yes), and on the CPU in x's layout (col: the column copy,
      // QuantizeOutputs::data_t_in_x_layout) for the 1xN grids that have it.
      const bool has_columns = device.is_cpu() && v.grid.block_rows == 1;
      for (const int mode : {0, 1, 2}) {
        if (mode == 2 && !has_columns) continue;
        const bool transposed = mode != 0, columns = mode == 2;
        const DType scale_dtype = v.grid.e8m0 ? DType::e8m0 : DType::f32;
        const Shape scale_shape = kernels::scale_grid_shape(rows, cols, v.grid);
        const Shape scale_t_shape = kernels::scale_grid_shape(cols, rows, v.grid);
        kernels::QuantizeOptions options;
        options.grid = v.grid;
        auto call = [&](int i) {
          const Set& set = s[i];
          kernels::QuantizeOutputs out;
          out.data = set.data.view(fp8, {rows, cols});
          out.scale_inv = set.scale_inv.view(scale_dtype, scale_shape);
          if (transposed) {
            out.data_t = set.data_t.view(fp8, columns ? Shape{rows, cols} : Shape{cols, rows});
            out.scale_inv_t = set.scale_inv_t.view(scale_dtype, scale_t_shape);
            out.data_t_in_x_layout = columns;
          }
          out.amax = set.small.view(DType::f32, {1}, 4);
          if (counts) out.counts = set.small.view(DType::i32, {2}, 8);
          kernels::QuantizeOptions o = options;
          if (v.given) o.given_scale = set.small.view(DType::f32, {1}, 0);
          kernels::quantize(set.x.view(in, {rows, cols}), out, o);
        };
        const double seconds = seconds_per_call(call, sets, reps);
        const double bytes =
            static_cast<double>(in_bytes) + static_cast<double>(n) * (transposed ? 2 : 1) +
            static_cast<double>(scale_bytes(rows, cols, v.grid)) +
            (transposed ? static_cast<double>(scale_bytes(cols, rows, v.grid)) : 0.0);
        const double gbs = bytes / seconds * 1e-9;
        // Passes over x: current scaling needs the amax first, and per-row scales with a
        // transposed copy need every column's amax first.
        const int x_reads = (!v.given && v.grid.block_rows == 0 && v.grid.block_cols == 0) ||
                                    (transposed && v.grid.block_rows == 1 && v.grid.block_cols == 0)
                                ? 2
                                : 1;
        std::printf("%-13s | %-16s | %-3s | %10.1f | %10.1f | %9.1f | %7.2f | %8d\n", shape_name,
                    v.name,
                    columns      ? "col"
                    : transposed ? "yes"
                                 : "no",
                    bytes * 1e-6, seconds * 1e6, gbs, gbs / copy_gbs, x_reads);
        std::fflush(stdout);
        json.write({{"bench", "quantize"},
                    {"device", device_name(device)},
                    {"rows", rows},
                    {"cols", cols},
                    {"input", dtype_name(in)},
                    {"fp8", dtype_name(fp8)},
                    {"variant", v.name},
                    {"transposed", transposed},
                    {"transposed_in_x_layout", columns},
                    {"counts", counts},
                    {"bytes", bytes},
                    {"seconds", seconds},
                    {"gb_per_s", gbs},
                    {"copy_gb_per_s", copy_gbs},
                    {"fraction_of_copy", gbs / copy_gbs},
                    {"x_reads", x_reads}});
      }
    }
  }
  std::printf(
      "\nT: with the transposed copy (data_t): yes K-major, col in x's layout (the CPU's column\n"
      "copy, read by its FP8 GEMM as stored). of copy: GB/s / the copy's GB/s at that shape.\n"
      "x reads: passes of the CUDA kernels over x (2: amaxes first; the second read comes from\n"
      "L2 where x fits).\n");
  return 0;
}

}  // namespace

void add_bench_quantize(cli::Commands& commands, CLI::App& bench) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* q =
      commands.add(bench, "quantize",
                   "bytes per second of every FP8 quantize variant against a copy of the input",
                   [o] { return run_quantize(*o); });
  q->add_option("--device", o->device, "cpu, cuda or cuda:N")
      ->check(cli::parses_with(device_from_name, "DEVICE"));
  cli::add_parsed(*q, "--shapes", o->shapes, parse_quantize_shapes,
                  "ROWSxCOLS,... (default cuda: 4096x4096..16384x16384, cpu: smaller)");
  q->add_option("--reps", o->reps, "timed batches per variant")->check(cli::at_least(1));
  q->add_option("--input", o->input, "the dtype quantized from")
      ->check(CLI::IsMember({"bf16", "f32"}));
  q->add_option("--fp8", o->fp8, "the FP8 format")->check(CLI::IsMember({"e4m3", "e5m2"}));
  q->add_flag("--counts", o->counts, "also count saturated and flushed values");
  q->add_option("--json", o->json, "also write one JSON record per variant to this file");
}

}  // namespace octet::bench
