// dist/fp8_comm.h: which data-parallel collectives move FP8 bytes (--fp8-comm): none, the
// all-gather of the block linears' weights (dist/fp8_weights.h), their gradients'
// reduce-scatter (dist/fp8_reduce.h), or both.
// defines: Fp8Comm, fp8_comm_name, fp8_comm_from_name, fp8_comm_grads, fp8_comm_weights
#pragma once

#include <string_view>

namespace octet::dist {

enum class Fp8Comm : unsigned char {
  none,           // bf16/f32 working weights gathered, f32 gradients reduced
  grads,          // the block linears' gradients reduce-scattered as FP8 codes
  weights,        // the block linears' weights all-gathered as FP8 codes and scales
  weights_grads,  // both
};

const char* fp8_comm_name(Fp8Comm c);  // "none" | "grads" | "weights" | "weights+grads"
Fp8Comm fp8_comm_from_name(std::string_view name);  // throws naming the choices
inline bool fp8_comm_grads(Fp8Comm c) {
  return c == Fp8Comm::grads || c == Fp8Comm::weights_grads;
}
inline bool fp8_comm_weights(Fp8Comm c) {
  return c == Fp8Comm::weights || c == Fp8Comm::weights_grads;
}

}  // namespace octet::dist
