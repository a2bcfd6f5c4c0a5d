// tests/tools/dump_conversions.cpp: writes octet's FP8 conversions of whole input
// spaces to binary files, for tests/python/test_ml_dtypes.py to compare with
// ml_dtypes. Usage: dump_conversions OUT_DIR. Files (index = input bit pattern):
//   {f16,bf16}_to_{e4m3,e5m2}.u8  65536 codes from the array kernel, non-saturating
//   {e4m3,e5m2}_to_f32.u32        256 little-endian f32 bit patterns (scalar decoders)
#include <cstdio>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/convert.h"

namespace {

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  OCTET_CHECK(f != nullptr, "dump_conversions", "cannot open ", path, " for writing");
  const size_t written = std::fwrite(data, 1, bytes, f);
  const bool closed = std::fclose(f) == 0;
  OCTET_CHECK(written == bytes && closed, "dump_conversions", "short write to ", path);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace octet;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::vector<uint16_t> all16(65536);
    for (size_t i = 0; i < all16.size(); ++i) all16[i] = static_cast<uint16_t>(i);
    std::vector<uint8_t> codes(all16.size());
    for (DType from : {DType::f16, DType::bf16}) {
      for (DType to : {DType::e4m3, DType::e5m2}) {
        kernels::convert(Tensor(all16.data(), from, {65536}), Tensor(codes.data(), to, {65536}),
                         Overflow::nonfinite);
        write_file(dir + "/" + dtype_name(from) + "_to_" + dtype_name(to) + ".u8", codes.data(),
                   codes.size());
      }
    }
    for (DType fp8 : {DType::e4m3, DType::e5m2}) {
      std::vector<uint32_t> bits(256);
      for (int v = 0; v < 256; ++v) bits[v] = f32_bits(fp8_to_f32(static_cast<uint8_t>(v), fp8));
      write_file(dir + "/" + dtype_name(fp8) + "_to_f32.u32", bits.data(), bits.size() * 4);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "dump_conversions: %s\n", e.what());
    return 1;
  }
  return 0;
}
