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
  }
  return "?";
}

Fp8Comm fp8_comm_from_name(std::string_view name) {
  for (Fp8Comm c : {Fp8Comm::none, Fp8Comm::grads}) {
    if (name == fp8_comm_name(c)) return c;
  }
  OCTET_CHECK(name != "weights" && name != "weights+grads", "train", "--fp8-comm ",
              std::string(name),
              ": the FP8 all-gather of the weights is not built yet (docs/perf/distributed.md, "
              "'Missing'); --fp8-comm grads moves the block linears' gradients in FP8");
  OCTET_FAIL("train", "--fp8-comm takes none or grads, not '", std::string(name), "'");
}

}  // namespace octet::dist
