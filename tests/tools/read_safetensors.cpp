// tests/tools/read_safetensors.cpp: reads a safetensors file with octet and prints what it
// found as JSON, for tests/python/test_safetensors.py to compare with what Python wrote.
// Usage: read_safetensors FILE. Output (one JSON document on stdout):
//   {"metadata": {...}, "tensors": [{"name", "dtype", "shape", "data_offsets",
//     "checksum": sum over bytes j of byte[j] * (j mod 65521 + 1) (mod 2^64, as int64),
//     "sum": the sum of the decoded values in element order, in double (null if not finite)}]}
// Errors go to stderr with exit code 1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"

namespace {

using namespace octet;

double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::f32:
      return t.as<float>()[i];
    case DType::bf16:
      return bf16_to_f32(t.as<uint16_t>()[i]);
    case DType::f16:
      return f16_to_f32(t.as<uint16_t>()[i]);
    case DType::e4m3:
      return e4m3_to_f32(t.as<uint8_t>()[i]);
    case DType::e5m2:
      return e5m2_to_f32(t.as<uint8_t>()[i]);
    case DType::e8m0:
      return e8m0_to_f32(t.as<uint8_t>()[i]);
    case DType::i32:
      return t.as<int32_t>()[i];
    case DType::u8:
      return t.as<uint8_t>()[i];
  }
  return NAN;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  try {
    const SafetensorsFile file = SafetensorsFile::open(argv[1]);
    Json metadata = Json::object();
    for (const auto& [key, value] : file.metadata()) metadata[key] = value;
    Json tensors = Json::array();
    for (const SafetensorsEntry& e : file.entries()) {
      Buffer buffer = Buffer::for_tensor(Device::cpu(), e.dtype, e.shape());
      const Tensor t = buffer.tensor(e.dtype, e.shape());
      file.read(e.name, t);
      uint64_t checksum = 0;
      const auto* bytes = static_cast<const uint8_t*>(t.data);
      for (size_t j = 0; j < t.nbytes(); ++j) checksum += uint64_t{bytes[j]} * (j % 65521 + 1);
      double sum = 0;
      for (int64_t i = 0; i < t.numel(); ++i) sum += value_at(t, i);
      Json shape = Json::array();
      for (int64_t d : e.dims) shape.push_back(d);
      Json entry = Json::object();
      entry["name"] = e.name;
      entry["dtype"] = safetensors_dtype_name(e.dtype);
      entry["shape"] = std::move(shape);
      entry["data_offsets"] = Json::array({e.begin, e.end});
      entry["checksum"] = static_cast<int64_t>(checksum);
      entry["sum"] = json_finite_or_null(sum);
      tensors.push_back(std::move(entry));
    }
    Json out = Json::object();
    out["metadata"] = std::move(metadata);
    out["tensors"] = std::move(tensors);
    std::printf("%s\n", json_dump(out, 2).c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "read_safetensors: %s\n", e.what());
    return 1;
  }
  return 0;
}
