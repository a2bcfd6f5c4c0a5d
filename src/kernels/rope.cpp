// kernels/rope.cpp: validation of the RoPE kernels and dispatch by device.
#include "kernels/rope.h"

#include <cmath>

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {
namespace {

void validate(const char* op, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
              int64_t head_dim, int64_t seq_len, float theta) {
  OCTET_CHECK(n_heads > 0 && n_kv_heads > 0, op, "n_heads=", n_heads,
              " and n_kv_heads=", n_kv_heads, " must be positive");
  OCTET_CHECK(head_dim > 0 && head_dim % 2 == 0, op, "head_dim=", head_dim,
              " must be positive and even (element i pairs with i + head_dim / 2)");
  OCTET_CHECK(seq_len > 0 && qkv.rows() % seq_len == 0, op, "the ", qkv.rows(),
              " tokens of qkv are not whole sequences of seq_len=", seq_len);
  OCTET_CHECK(std::isfinite(theta) && theta > 0.0f, op, "theta must be finite and > 0, got ",
              theta);
  check_activation(op, "qkv", qkv, qkv.rows(), (n_heads + 2 * n_kv_heads) * head_dim, qkv.device);
}

}  // namespace

void rope_forward(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                  int64_t seq_len, float theta) {
  constexpr const char* op = "rope_forward";
  validate(op, qkv, n_heads, n_kv_heads, head_dim, seq_len, theta);
  if (qkv.numel() == 0) return;
  if (qkv.device.is_cpu()) {
    return cpu::rope(qkv, n_heads, n_kv_heads, head_dim, seq_len, theta, false);
  }
  OCTET_CUDA_RETURN(op, qkv, rope, qkv, n_heads, n_kv_heads, head_dim, seq_len, theta, false);
}

void rope_backward(const Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   int64_t seq_len, float theta) {
  constexpr const char* op = "rope_backward";
  validate(op, dqkv, n_heads, n_kv_heads, head_dim, seq_len, theta);
  if (dqkv.numel() == 0) return;
  if (dqkv.device.is_cpu()) {
    return cpu::rope(dqkv, n_heads, n_kv_heads, head_dim, seq_len, theta, true);
  }
  OCTET_CUDA_RETURN(op, dqkv, rope, dqkv, n_heads, n_kv_heads, head_dim, seq_len, theta, true);
}

}  // namespace octet::kernels
