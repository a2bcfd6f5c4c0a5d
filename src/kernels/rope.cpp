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

void validate_table(const char* op, const Tensor& table, DType dtype, int64_t head_dim,
                    int64_t seq_len) {
  OCTET_CHECK(table.dtype == dtype && table.rows() == seq_len && table.cols() == head_dim &&
                  table.device.is_cpu() && table.data != nullptr,
              op, "the RoPE table must be ", dtype_name(dtype), " [", seq_len, ", ", head_dim,
              "] on the CPU (from rope_table, in qkv's dtype), got ", table.str());
}

void rotate(const char* op, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
            int64_t head_dim, int64_t seq_len, float theta, const Tensor& table, bool backward) {
  validate(op, qkv, n_heads, n_kv_heads, head_dim, seq_len, theta);
  if (!table.empty()) {
    OCTET_CHECK(qkv.device.is_cpu(), op,
                "a RoPE table is for CPU tensors only (CUDA computes its angles), got qkv on ",
                device_name(qkv.device));
    validate_table(op, table, qkv.dtype, head_dim, seq_len);
  }
  if (qkv.numel() == 0) return;
  if (qkv.device.is_cpu()) {
    if (!table.empty()) {
      return cpu::rope(qkv, n_heads, n_kv_heads, head_dim, seq_len, table, backward);
    }
    return cpu::rope(qkv, n_heads, n_kv_heads, head_dim, seq_len, theta, backward);
  }
  OCTET_CUDA_RETURN(op, qkv, rope, qkv, n_heads, n_kv_heads, head_dim, seq_len, theta, backward);
}

}  // namespace

void rope_forward(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                  int64_t seq_len, float theta, const Tensor& table) {
  rotate("rope_forward", qkv, n_heads, n_kv_heads, head_dim, seq_len, theta, table, false);
}

void rope_backward(const Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   int64_t seq_len, float theta, const Tensor& table) {
  rotate("rope_backward", dqkv, n_heads, n_kv_heads, head_dim, seq_len, theta, table, true);
}

void rope_table(const Tensor& table, int64_t head_dim, int64_t seq_len, float theta) {
  constexpr const char* op = "rope_table";
  OCTET_CHECK(head_dim > 0 && head_dim % 2 == 0, op, "head_dim=", head_dim,
              " must be positive and even (element i pairs with i + head_dim / 2)");
  OCTET_CHECK(seq_len > 0, op, "seq_len=", seq_len, " must be positive");
  OCTET_CHECK(std::isfinite(theta) && theta > 0.0f, op, "theta must be finite and > 0, got ",
              theta);
  OCTET_CHECK(is_activation(table.dtype), op, "the table must be f32 or bf16 (qkv's dtype), got ",
              table.str());
  validate_table(op, table, table.dtype, head_dim, seq_len);
  cpu::rope_table(table, head_dim, seq_len, theta);
}

}  // namespace octet::kernels
