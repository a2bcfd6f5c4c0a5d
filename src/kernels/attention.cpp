// kernels/attention.cpp: validation of the attention kernels and dispatch by device.
#include "kernels/attention.h"

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {
namespace {

AttentionDims validate(const char* op, const Tensor& qkv, int64_t batch, int64_t seq_len,
                       int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                       const Tensor& workspace) {
  OCTET_CHECK(batch >= 0 && seq_len > 0 && head_dim > 0, op, "batch=", batch, ", seq_len=", seq_len,
              " and head_dim=", head_dim, " must be positive");
  OCTET_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, "n_heads=", n_heads,
              " is not a positive multiple of n_kv_heads=", n_kv_heads,
              " (each kv head serves n_heads / n_kv_heads q heads)");
  const AttentionDims d{batch, seq_len, n_heads, n_kv_heads, head_dim};
  check_activation(op, "qkv", qkv, batch * seq_len, (n_heads + 2 * n_kv_heads) * head_dim,
                   qkv.device);
  // The CUDA kernels need no workspace (they recompute what they would keep there).
  if (qkv.device.is_cpu()) {
    const size_t need = cpu::attention_workspace_bytes(seq_len, head_dim, 1);
    OCTET_CHECK(
        workspace.device == qkv.device && workspace.nbytes() >= need && workspace.data != nullptr,
        op, "the workspace must hold at least ", need, " bytes on ", device_name(qkv.device),
        " (got ", workspace.str(), "); size it with attention_workspace_bytes");
  }
  return d;
}

}  // namespace

size_t attention_workspace_bytes(int64_t seq_len, int64_t head_dim, int threads) {
  OCTET_CHECK(seq_len >= 0 && head_dim >= 0 && threads >= 0, "attention_workspace_bytes",
              "seq_len=", seq_len, ", head_dim=", head_dim, " and threads=", threads,
              " must not be negative");
  return cpu::attention_workspace_bytes(seq_len, head_dim, threads);
}

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, int64_t batch,
                       int64_t seq_len, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                       const Tensor& workspace) {
  constexpr const char* op = "attention_forward";
  const AttentionDims d =
      validate(op, qkv, batch, seq_len, n_heads, n_kv_heads, head_dim, workspace);
  const int64_t tokens = batch * seq_len;
  check_activation(op, "out", out, tokens, n_heads * head_dim, qkv.device);
  OCTET_CHECK(out.dtype == qkv.dtype, op, "out must have qkv's dtype ", dtype_name(qkv.dtype),
              ", got ", out.str());
  check_tensor(op, "lse", lse, DType::f32, batch * n_heads * seq_len, qkv.device);
  check_no_overlap(op, "out", out, "qkv", qkv);
  check_no_overlap(op, "lse", lse, "qkv", qkv);
  if (tokens == 0) return;
  if (qkv.device.is_cpu()) return cpu::attention_forward(qkv, out, lse, d, workspace);
  OCTET_CUDA_RETURN(op, qkv, attention_forward, qkv, out, lse, d, workspace);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, int64_t batch, int64_t seq_len, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, const Tensor& workspace) {
  constexpr const char* op = "attention_backward";
  const AttentionDims d =
      validate(op, qkv, batch, seq_len, n_heads, n_kv_heads, head_dim, workspace);
  const int64_t tokens = batch * seq_len;
  check_activation(op, "dout", dout, tokens, n_heads * head_dim, qkv.device);
  check_activation(op, "out", out, tokens, n_heads * head_dim, qkv.device);
  check_activation(op, "dqkv", dqkv, tokens, qkv.cols(), qkv.device);
  OCTET_CHECK(dout.dtype == qkv.dtype && out.dtype == qkv.dtype && dqkv.dtype == qkv.dtype, op,
              "dout, out and dqkv must have qkv's dtype ", dtype_name(qkv.dtype), ", got ",
              dout.str(), ", ", out.str(), " and ", dqkv.str());
  check_tensor(op, "lse", lse, DType::f32, batch * n_heads * seq_len, qkv.device);
  check_no_overlap(op, "dqkv", dqkv, "qkv", qkv);
  check_no_overlap(op, "dqkv", dqkv, "dout", dout);
  check_no_overlap(op, "dqkv", dqkv, "out", out);
  check_no_overlap(op, "dqkv", dqkv, "lse", lse);
  if (tokens == 0) return;
  if (qkv.device.is_cpu()) return cpu::attention_backward(dout, qkv, out, lse, dqkv, d, workspace);
  OCTET_CUDA_RETURN(op, qkv, attention_backward, dout, qkv, out, lse, dqkv, d, workspace);
}

}  // namespace octet::kernels
