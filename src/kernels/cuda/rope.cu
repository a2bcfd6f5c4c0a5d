// kernels/cuda/rope.cu: rotary position embedding on CUDA devices, in place on the q and k
// heads of the packed qkv activation, with cos and sin computed as the CPU kernel does.
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"

namespace octet::kernels::cuda {
namespace {

constexpr int kRopeThreads = 256;
// Heads whose elements a thread loads before it stores any: independent loads in flight.
constexpr int kHeadBatch = 4;

// Thread (x, y) takes token t = blockIdx.x * blockDim.y + y (grid-stride) and the pairs
// i = x, x + blockDim.x, ... < head_dim / 2: cos and sin once per (t, i), then the pair
// (i, i + hd/2) of every q and k head. sign = -1: the transposed rotation.
__global__ void rope_kernel(void* qkv, bool bf16, int64_t tokens, int rotated_heads, int64_t width,
                            int head_dim, int64_t seq_len, float theta, float sign) {
  const int half = head_dim / 2;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const float position = static_cast<float>(t % seq_len);
    const int64_t row = t * width;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      // The CPU kernel's (and Hugging Face's) fp32 steps, each rounded: exponent 2i / hd,
      // inv_freq = 1 / theta^exponent, angle = p * inv_freq. powf, sinf and cosf are CUDA's
      // (within 4, 2 and 2 ulp of the rounded result), not libm's: the tests bound the gap.
      const float exponent = __fdiv_rn(static_cast<float>(2 * i), static_cast<float>(head_dim));
      const float inv_freq = __fdiv_rn(1.0f, powf(theta, exponent));
      const float angle = __fmul_rn(position, inv_freq);
      float sin_angle, cos_angle;
      sincosf(angle, &sin_angle, &cos_angle);
      // cos and sin in the activation dtype, as Hugging Face casts them.
      const float c = round_as(bf16, cos_angle);
      const float s = sign * round_as(bf16, sin_angle);
      for (int h0 = 0; h0 < rotated_heads; h0 += kHeadBatch) {
        float x1[kHeadBatch], x2[kHeadBatch];
#pragma unroll
        for (int q = 0; q < kHeadBatch; ++q) {
          const int64_t at = row + static_cast<int64_t>(h0 + q) * head_dim + i;
          x1[q] = h0 + q < rotated_heads ? load1(qkv, bf16, at) : 0.0f;
          x2[q] = h0 + q < rotated_heads ? load1(qkv, bf16, at + half) : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < kHeadBatch; ++q) {
          if (h0 + q >= rotated_heads) break;
          const int64_t at = row + static_cast<int64_t>(h0 + q) * head_dim + i;
          // The CPU's operations, each rounded (no FMA contraction): for equal c and s the
          // two devices agree bit for bit.
          store1(qkv, bf16, at, __fsub_rn(__fmul_rn(x1[q], c), __fmul_rn(x2[q], s)));
          store1(qkv, bf16, at + half, __fadd_rn(__fmul_rn(x2[q], c), __fmul_rn(x1[q], s)));
        }
      }
    }
  }
}

}  // namespace

void rope(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t seq_len,
          float theta, bool backward) {
  const char* op = backward ? "rope_backward" : "rope_forward";
  OCTET_CUDA_CHECK(op, cudaSetDevice(qkv.device.index));
  const int64_t half = head_dim / 2;
  OCTET_CHECK(n_heads + n_kv_heads <= (int64_t{1} << 30) && head_dim <= (int64_t{1} << 30), op,
              "n_heads=", n_heads, ", n_kv_heads=", n_kv_heads, " and head_dim=", head_dim,
              " are beyond what the CUDA kernel indexes with int");
  const int bx = static_cast<int>(half < kRopeThreads ? half : kRopeThreads);
  const dim3 block(bx, kRopeThreads / bx);
  launch_kernel(rope_kernel, blocks_for(qkv.rows(), static_cast<int>(block.y)), block, 0, stream(),
                qkv.data, qkv.dtype == DType::bf16, qkv.rows(),
                static_cast<int>(n_heads + n_kv_heads), qkv.cols(), static_cast<int>(head_dim),
                seq_len, theta, backward ? -1.0f : 1.0f);
  OCTET_CUDA_CHECK_LAUNCH(op);
}

}  // namespace octet::kernels::cuda
