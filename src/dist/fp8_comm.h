// dist/fp8_comm.h: which data-parallel collectives move FP8 bytes (--fp8-comm): none, or the
// gradient reduce-scatter of the block linears. The FP8 all-gather of the weights (`weights`,
// `weights+grads` in issue 11) is not built; those names are refused with an error saying so.
// defines: Fp8Comm, fp8_comm_name, fp8_comm_from_name, fp8_comm_grads
#pragma once

#include <string_view>

namespace octet::dist {

enum class Fp8Comm : unsigned char {
  none,   // bf16/f32 working weights gathered, f32 gradients reduced
  grads,  // the block linears' gradients reduce-scattered as FP8 codes (dist/fp8_reduce.h)
};

const char* fp8_comm_name(Fp8Comm c);               // "none" | "grads"
Fp8Comm fp8_comm_from_name(std::string_view name);  // throws naming the choices
inline bool fp8_comm_grads(Fp8Comm c) {
  return c == Fp8Comm::grads;
}

}  // namespace octet::dist
