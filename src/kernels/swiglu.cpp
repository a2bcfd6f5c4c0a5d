// kernels/swiglu.cpp: validation of the SwiGLU kernels and dispatch by device.
#include "kernels/swiglu.h"

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  constexpr const char* op = "swiglu_forward";
  const int64_t rows = gate_up.rows(), hidden = gate_up.cols() / 2;
  OCTET_CHECK(gate_up.cols() % 2 == 0, op, "gate_up must be [T, 2F] (gate, then up), got ",
              gate_up.str());
  check_activation(op, "gate_up", gate_up, rows, 2 * hidden, gate_up.device);
  check_activation(op, "out", out, rows, hidden, gate_up.device);
  OCTET_CHECK(out.dtype == gate_up.dtype, op, "out must have gate_up's dtype ",
              dtype_name(gate_up.dtype), ", got ", out.str());
  check_no_overlap(op, "out", out, "gate_up", gate_up);
  if (out.numel() == 0) return;
  if (gate_up.device.is_cpu()) return cpu::swiglu_forward(gate_up, out);
  OCTET_CUDA_RETURN(op, gate_up, swiglu_forward, gate_up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  constexpr const char* op = "swiglu_backward";
  const int64_t rows = gate_up.rows(), hidden = gate_up.cols() / 2;
  OCTET_CHECK(gate_up.cols() % 2 == 0, op, "gate_up must be [T, 2F] (gate, then up), got ",
              gate_up.str());
  check_activation(op, "gate_up", gate_up, rows, 2 * hidden, gate_up.device);
  check_activation(op, "dout", dout, rows, hidden, gate_up.device);
  check_activation(op, "dgate_up", dgate_up, rows, 2 * hidden, gate_up.device);
  OCTET_CHECK(dout.dtype == gate_up.dtype && dgate_up.dtype == gate_up.dtype, op,
              "dout and dgate_up must have gate_up's dtype ", dtype_name(gate_up.dtype), ", got ",
              dout.str(), " and ", dgate_up.str());
  if (dgate_up.data != gate_up.data) check_no_overlap(op, "dgate_up", dgate_up, "gate_up", gate_up);
  check_no_overlap(op, "dgate_up", dgate_up, "dout", dout);
  if (dout.numel() == 0) return;
  if (gate_up.device.is_cpu()) return cpu::swiglu_backward(dout, gate_up, dgate_up);
  OCTET_CUDA_RETURN(op, gate_up, swiglu_backward, dout, gate_up, dgate_up);
}

}  // namespace octet::kernels
