// dist/fp8_comm.h: which data-parallel collectives move FP8 bytes (--fp8-comm): none, the
// all-gather of the updated block-linear weights, or that and the gradient reduce-scatter.
// defines: Fp8Comm, fp8_comm_name, fp8_comm_from_name, fp8_comm_weights, fp8_comm_grads
#pragma once

#include <string_view>

namespace octet::dist {

enum class Fp8Comm : unsigned char {
  none,               // bf16/f32 working weights gathered, f32 gradients reduced
  weights,            // each rank quantizes its shard of the block linears; FP8 gathered
  weights_and_grads,  // and the block linears' gradients reduce-scattered in FP8
};

const char* fp8_comm_name(Fp8Comm c);               // "none" | "weights" | "weights+grads"
Fp8Comm fp8_comm_from_name(std::string_view name);  // throws naming the choices
inline bool fp8_comm_weights(Fp8Comm c) {
  return c != Fp8Comm::none;
}
inline bool fp8_comm_grads(Fp8Comm c) {
  return c == Fp8Comm::weights_and_grads;
}

}  // namespace octet::dist
