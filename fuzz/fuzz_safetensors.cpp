// fuzz/fuzz_safetensors.cpp: SafetensorsFile::open and read on any bytes: an octet::Error
// or a file whose every tensor (up to 1 MiB) reads into a buffer of its dtype and shape.
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  const fuzz::FuzzFile file("model.safetensors", data, size);
  try {
    const SafetensorsFile st = SafetensorsFile::open(file.path());
    for (const std::string& name : st.names()) {
      const SafetensorsEntry& e = st.info(name);
      if (e.nbytes() > (1u << 20)) continue;
      const Shape shape = e.shape();  // may refuse a rank above Shape::kMaxRank
      Buffer buffer(Device::cpu(), e.nbytes());
      st.read(name, buffer.view(e.dtype, shape, 0));
    }
    for (const auto& [key, value] : st.metadata()) (void)key.size(), (void)value.size();
  } catch (const Error&) {
  }
  return 0;
}
