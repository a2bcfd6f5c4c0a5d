// kernels/swiglu.cpp: validation of the SwiGLU kernels and dispatch by device.
#include "kernels/swiglu.h"

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {
namespace {

// An optional amax output: f32[1] on the CPU (CUDA's quantize takes its own amax, in a pass that
// reads x from L2).
void check_amax(const char* op, const char* name, const Tensor& amax, Device device) {
  if (amax.empty()) return;
  OCTET_CHECK(device.is_cpu(), op, name, " is computed on the CPU only, got a tensor on ",
              device_name(device));
  OCTET_CHECK(amax.dtype == DType::f32 && amax.numel() == 1 && amax.device == device &&
                  amax.data != nullptr,
              op, name, " must be f32[1] on the CPU, got ", amax.str());
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& out, const Tensor& out_amax) {
  constexpr const char* op = "swiglu_forward";
  const int64_t rows = gate_up.rows(), hidden = gate_up.cols() / 2;
  OCTET_CHECK(gate_up.cols() % 2 == 0, op, "gate_up must be [T, 2F] (gate, then up), got ",
              gate_up.str());
  check_activation(op, "gate_up", gate_up, rows, 2 * hidden, gate_up.device);
  check_activation(op, "out", out, rows, hidden, gate_up.device);
  OCTET_CHECK(out.dtype == gate_up.dtype, op, "out must have gate_up's dtype ",
              dtype_name(gate_up.dtype), ", got ", out.str());
  check_no_overlap(op, "out", out, "gate_up", gate_up);
  check_amax(op, "out_amax", out_amax, gate_up.device);
  if (!out_amax.empty()) out_amax.as<float>()[0] = 0.0f;
  if (out.numel() == 0) return;
  if (gate_up.device.is_cpu()) return cpu::swiglu_forward(gate_up, out, out_amax);
  OCTET_CUDA_RETURN(op, gate_up, swiglu_forward, gate_up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                     const Tensor& dgate_up_amax) {
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
  check_amax(op, "dgate_up_amax", dgate_up_amax, gate_up.device);
  if (!dgate_up_amax.empty()) dgate_up_amax.as<float>()[0] = 0.0f;
  if (dout.numel() == 0) return;
  if (gate_up.device.is_cpu()) return cpu::swiglu_backward(dout, gate_up, dgate_up, dgate_up_amax);
  OCTET_CUDA_RETURN(op, gate_up, swiglu_backward, dout, gate_up, dgate_up);
}

}  // namespace octet::kernels
