// kernels/cpu/embedding_cpu.cpp: embedding row lookup and its scatter-add gradient on the CPU.
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"

namespace octet::kernels::cpu {
namespace {

// Column blocks of the gradient that one thread owns: 64 floats, one cache line x 4.
constexpr int64_t kColumnBlock = 64;

// Before any thread starts, so that the error names the first bad id.
void check_ids(const char* op, const int32_t* ids, int64_t tokens, int64_t vocab) {
  for (int64_t t = 0; t < tokens; ++t) {
    OCTET_CHECK(ids[t] >= 0 && ids[t] < vocab, op, "ids[", t, "] = ", ids[t],
                " is outside the vocabulary [0, V=", vocab,
                "); check the tokenizer against the model's vocab_size");
  }
}

template <typename In, typename Out>
void gather(const int32_t* ids, const In* table, Out* out, int64_t tokens, int64_t dim) {
#pragma omp parallel for schedule(static) if (tokens * dim > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const In* row = table + ids[t] * dim;
    Out* o = out + t * dim;
    for (int64_t j = 0; j < dim; ++j) o[j] = from_f32<Out>(to_f32(row[j]));
  }
}

// Threads own column blocks of dtable and walk the tokens in order: every element
// sums its tokens in increasing t whatever the thread count, and no two threads
// write one element.
template <typename G>
void scatter_add(const int32_t* ids, const G* dout, float* dtable, int64_t tokens, int64_t dim) {
  const int64_t blocks = (dim + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (tokens * dim > kParallelElements)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock, j1 = std::min(dim, j0 + kColumnBlock);
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = dtable + ids[t] * dim;
      const G* g = dout + t * dim;
      for (int64_t j = j0; j < j1; ++j) row[j] += to_f32(g[j]);
    }
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t tokens = ids.numel(), dim = table.cols();
  check_ids("embedding_forward", ids.as<const int32_t>(), tokens, table.rows());
  with_activation(table.dtype, [&](auto in) {
    with_activation(out.dtype, [&](auto o) {
      using In = decltype(in);
      using Out = decltype(o);
      gather(ids.as<const int32_t>(), table.as<const In>(), out.as<Out>(), tokens, dim);
    });
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const int64_t tokens = ids.numel(), dim = dtable.cols();
  check_ids("embedding_backward", ids.as<const int32_t>(), tokens, dtable.rows());
  with_activation(dout.dtype, [&](auto g) {
    using G = decltype(g);
    scatter_add(ids.as<const int32_t>(), dout.as<const G>(), dtable.as<float>(), tokens, dim);
  });
}

}  // namespace octet::kernels::cpu
