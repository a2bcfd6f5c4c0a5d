// dist/fp8_comm.cpp: the names of the --fp8-comm choices.
#include "dist/fp8_comm.h"

#include <string>

#include "core/error.h"

namespace octet::dist {

const char* fp8_comm_name(Fp8Comm c) {
  switch (c) {
    case Fp8Comm::none:
      return "none";
    case Fp8Comm::grads:
      return "grads";
    case Fp8Comm::weights:
      return "weights";
    case Fp8Comm::weights_grads:
      return "weights+grads";
  }
  return "?";
}

Fp8Comm fp8_comm_from_name(std::string_view name) {
  for (Fp8Comm c : {Fp8Comm::none, Fp8Comm::grads, Fp8Comm::weights, Fp8Comm::weights_grads}) {
    if (name == fp8_comm_name(c)) return c;
  }
  OCTET_FAIL("train", "--fp8-comm takes none, grads, weights or weights+grads, not '",
             std::string(name), "'");
}

}  // namespace octet::dist
