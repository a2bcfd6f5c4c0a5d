// kernels/cpu/attention_tiled_cpu.cpp: causal GQA attention on the CPU in tiles, with
// AVX-512 (attention_tile_ops.h) or AVX2 (attention_tile_ops_avx2.h) and SLEEF's vector exp
// (1 ulp, as libm's expf); bf16 score products from AVX512_BF16 where the machine has it
// (attention_dot_bf16.h). The tasks are written once (attention_tiled.inc) and compiled per
// level. Forward: per tile of 32
// query rows, the tile's scaled scores against every key up to its last row are kept in
// the thread's workspace (32 rows x S floats, never S x S), so the softmax takes the exact
// row maximum as the scalar kernel does; then P v block by block. One task per (sequence,
// kv head), its keys and values loaded once, where those tasks share out evenly over the
// team, otherwise one per (sequence, q head, tile). Backward: P and dS recomputed for
// 32 x 32 tiles from q, k and the saved lse; one fused task per (sequence, kv head) (P and
// dS once for dq, dk and dv) where those share out evenly, otherwise two passes (per query
// tile for dq, then per block of 32 keys for dk and dv). Either way dq sums the key blocks
// in increasing order and dk, dv the q heads that share them, then the query tiles, in
// increasing order, with one writer per element: the same bits for any thread count.
#include "kernels/cpu/attention_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"

#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_dot_bf16.h"
#include "kernels/cpu/attention_tile_ops.h"
#include "kernels/cpu/attention_tile_ops_avx2.h"
#include "kernels/cpu/vector_math.h"

#if defined(OCTET_CPU_VECTOR_EXP)
#define OCTET_TILED_ATTENTION 1
#endif

namespace octet::kernels::cpu::attn {

#if defined(OCTET_TILED_ATTENTION)
namespace avx512 {
namespace {
#define OCTET_TILED_TARGET OCTET_AVX512
constexpr bool kDot16 = true;  // bf16 score products from vdpbf16ps where the CPU has it
#include "kernels/cpu/attention_tiled.inc"
#undef OCTET_TILED_TARGET
}  // namespace
}  // namespace avx512

namespace avx2 {
namespace {
#define OCTET_TILED_TARGET OCTET_AVX2
constexpr bool kDot16 = false;
#include "kernels/cpu/attention_tiled.inc"
#undef OCTET_TILED_TARGET
}  // namespace
}  // namespace avx2

bool tiled_available() {
  return usable_isa("attention") != Isa::baseline;
}

void tiled_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Layout& layout,
                   const Slices& ws) {
  const bool wide = usable_isa("attention") == Isa::avx512;
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    if (wide)
      return avx512::forward_tiles(qkv.as<const A>(), out.as<A>(), lse.as<float>(), layout, ws);
    avx2::forward_tiles(qkv.as<const A>(), out.as<A>(), lse.as<float>(), layout, ws);
  });
}

void tiled_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                    const Tensor& dqkv, const Layout& layout, const Slices& ws) {
  const bool wide = usable_isa("attention") == Isa::avx512;
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    if (wide)
      return avx512::backward_tiles(dout.as<const A>(), qkv.as<const A>(), out.as<const A>(),
                                    lse.as<const float>(), dqkv.as<A>(), layout, ws);
    avx2::backward_tiles(dout.as<const A>(), qkv.as<const A>(), out.as<const A>(),
                         lse.as<const float>(), dqkv.as<A>(), layout, ws);
  });
}

#else  // no SLEEF or no x86-64: the scalar kernels run

bool tiled_available() {
  return false;
}
void tiled_forward(const Tensor&, const Tensor&, const Tensor&, const Layout&, const Slices&) {}
void tiled_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Layout&, const Slices&) {}

#endif

}  // namespace octet::kernels::cpu::attn
