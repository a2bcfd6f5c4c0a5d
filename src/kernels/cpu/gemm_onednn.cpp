// kernels/cpu/gemm_onednn.cpp: the CPU GEMM engine on oneDNN's matmul primitive
// (AVX-512 BF16 / AMX brgemm kernels where the CPU has them). Built only when
// CMake finds oneDNN; gemm_noonednn.cpp stands in otherwise.
#include <dnnl.hpp>

#include <algorithm>
#include <bit>
#include <compare>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include <omp.h>

#include "core/error.h"
#include "kernels/cpu/gemm_cpu.h"

namespace octet::kernels::cpu {
namespace {

using dnnl::memory;

// What a primitive is specialised for. alpha (the FP8 scale_inv factors, which change every
// step) is a run-time argument where it is not 1. beta is baked in as a sum post-op, but
// training uses few values of it (0 and 1). The thread count is part of the key because oneDNN
// plans its parallel split at creation.
struct Key {
  int64_t m, n, k;
  DType ab_dtype, c_dtype;
  bool trans_a, trans_b;
  bool scaled;  // alpha != 1
  uint32_t beta_bits;
  int threads;
  auto operator<=>(const Key&) const = default;
};

// One primitive and the memory objects it runs with. Everything here is made
// on the first GEMM of its key; later calls only swap the data pointers in,
// so a call allocates nothing (the scratchpad is ours, not oneDNN's).
struct Entry {
  std::mutex mutex;  // the memory objects are rebound per call
  dnnl::matmul primitive;
  memory a, b, c, alpha, scratchpad;  // alpha: empty where it is 1
  int alpha_arg = 0;                  // how alpha is passed: its execution argument
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::data_type dnnl_type(DType d) {
  return d == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// Which of oneDNN 2.6's kernels a primitive gets follows from how alpha is passed: with run-time
// output scales only its older gemm:jit ones; with alpha as a binary multiply by a 1 x 1 f32
// tensor, or with no alpha (alpha 1), its brgemm ones too, which it then prefers. Where brgemm
// runs without AMX (AVX512_BF16), on the Zen 4 of docs/perf/cpu-step.md gemm:jit took up to
// 1.22x brgemm's time where a dimension is at most 256 (the tiny and 256-wide models' GEMMs),
// and brgemm up to 1.16x gemm:jit's where every one is 512 or more (`small`'s weight gradients
// and LM head): those take the output scale (1 where alpha is). With AMX brgemm is kept: it is
// the only kernel that uses AMX. Where brgemm declines (no AVX-512) the binary multiply could
// leave only oneDNN's reference kernel (after a sum post-op), so there alpha is an output scale
// too. Every way gives C = alpha acc (+ beta C), in that order; the kernels' summation orders
// differ.
constexpr int64_t kBrgemmMaxSmallDim = 256;

std::unique_ptr<Entry> make_entry(const Matmul& mm) {
  const memory::dim m = mm.m, n = mm.n, k = mm.k;
  const auto ab = dnnl_type(mm.ab_dtype);
  // Strides say where op(A)[i, kk] and op(B)[kk, j] live: the transposes are free.
  const memory::desc a_md({m, k}, ab, mm.trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc b_md({k, n}, ab, mm.trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc c_md({m, n}, dnnl_type(mm.c_dtype), memory::dims{n, 1});

  const dnnl::engine& engine = cpu_engine();
  // C = alpha * acc + beta * C, in that order: alpha as a binary multiply or an output scale.
  const memory::desc alpha_md({1, 1}, memory::data_type::f32, memory::dims{1, 1});
  auto describe = [&](bool brgemm) {
    dnnl::primitive_attr attr;
    dnnl::post_ops post_ops;
    if (!brgemm) {
      attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    } else if (mm.alpha != 1.0f) {
      post_ops.append_binary(dnnl::algorithm::binary_mul, alpha_md);
    }
    if (mm.beta != 0.0f) post_ops.append_sum(mm.beta);
    attr.set_post_ops(post_ops);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
  };
  dnnl::matmul::primitive_desc pd;
  bool output_scale = true;
  try {
    pd = describe(true);
    const std::string_view impl = pd.impl_info_str();
    const bool large = std::min({m, n, k}) > kBrgemmMaxSmallDim;
    output_scale =
        !impl.starts_with("brg") || (impl.find("amx") == std::string_view::npos && large);
  } catch (const dnnl::error&) {  // no kernel takes the binary multiply: the output scale
  }
  if (output_scale) pd = describe(false);

  auto e = std::make_unique<Entry>();
  e->primitive = dnnl::matmul(pd);
  e->a = memory(a_md, engine, DNNL_MEMORY_NONE);
  e->b = memory(b_md, engine, DNNL_MEMORY_NONE);
  e->c = memory(c_md, engine, DNNL_MEMORY_NONE);
  if (output_scale) {
    e->alpha = memory(memory::desc({1}, memory::data_type::f32, memory::dims{1}), engine);
    e->alpha_arg = DNNL_ARG_ATTR_OUTPUT_SCALES;
  } else if (mm.alpha != 1.0f) {
    e->alpha = memory(alpha_md, engine);
    e->alpha_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;
  }
  e->scratchpad = memory(pd.scratchpad_desc(), engine);
  return e;
}

// The primitive cache: filled on first use of each key, under a mutex; entries
// live until exit (a training run has a handful of GEMM shapes).
Entry& entry_for(const Matmul& mm) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Entry>> cache;
  const Key key{mm.m,
                mm.n,
                mm.k,
                mm.ab_dtype,
                mm.c_dtype,
                mm.trans_a,
                mm.trans_b,
                mm.alpha != 1.0f,
                std::bit_cast<uint32_t>(mm.beta),
                omp_get_max_threads()};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_entry(mm)).first;
  return *it->second;
}

}  // namespace

bool onednn_available() {
  return true;
}

bool onednn_bf16_available() {
  // The question put to oneDNN itself: whether it makes a small bf16 matmul here.
  static const bool available = [] {
    try {
      const memory::desc md({16, 16}, memory::data_type::bf16, memory::dims{16, 1});
      const memory::desc out({16, 16}, memory::data_type::f32, memory::dims{16, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, out), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

void onednn_gemm(const Matmul& mm) {
  try {
    Entry& e = entry_for(mm);
    // A stream per thread, made once: oneDNN streams are not meant to be shared
    // between threads that execute concurrently.
    thread_local dnnl::stream stream(cpu_engine());
    std::lock_guard<std::mutex> lock(e.mutex);
    e.a.set_data_handle(const_cast<void*>(mm.a));
    e.b.set_data_handle(const_cast<void*>(mm.b));
    e.c.set_data_handle(mm.c);
    // The C API takes the arguments as an array, where the C++ one builds a map per call.
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, e.a.get()}, {DNNL_ARG_WEIGHTS, e.b.get()},
        {DNNL_ARG_DST, e.c.get()}, {DNNL_ARG_SCRATCHPAD, e.scratchpad.get()},
        {e.alpha_arg, nullptr},
    };
    int nargs = static_cast<int>(std::size(args)) - 1;
    if (e.alpha) {
      *static_cast<float*>(e.alpha.get_data_handle()) = mm.alpha;
      args[nargs++].memory = e.alpha.get();
    }
    const dnnl_status_t status =
        dnnl_primitive_execute(e.primitive.get(), stream.get(), nargs, args);
    OCTET_CHECK(status == dnnl_success, "gemm", "oneDNN's matmul failed with status ",
                static_cast<int>(status));
    stream.wait();
  } catch (const dnnl::error& err) {
    OCTET_FAIL(
        "gemm", "oneDNN refused the ", mm.m, "x", mm.n, "x", mm.k, " ", dtype_name(mm.ab_dtype),
        " matmul: ", err.what(), "; ",
        mm.ab_dtype == DType::bf16 ? "OCTET_CPU_GEMM=onednn-f32 multiplies bf16 as f32, " : "",
        "OCTET_CPU_GEMM=reference uses the portable engine");
  }
}

}  // namespace octet::kernels::cpu
