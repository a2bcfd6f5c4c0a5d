// tests/tools/write_safetensors.cpp: writes a safetensors file with octet, one or more tensors
// of every dtype under HF LLaMA names, for tests/python/test_safetensors.py to read with the
// reference `safetensors` library. Usage: write_safetensors OUT_FILE. Contents, for tensor k
// (its position below) and flat element index i of n:
//   F32          (float(i) - float(n / 2)) * 0.01f + float(k), in float arithmetic
//   BF16, F16    ((7 i + k) mod 61 - 30) / 8, exact in both formats
//   F8_*, U8     raw codes (37 i + 11 k) mod 256, every code including NaNs
//   I32          100003 i - 700000 + k
// Metadata: {"format": "pt", "producer": "octet"}.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace {

using namespace octet;

struct Spec {
  const char* name;
  DType dtype;
  Shape shape;
};

void fill(const Tensor& t, int64_t k) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float half_step = static_cast<float>(((7 * i + k) % 61) - 30) / 8.0f;
    const auto code = static_cast<uint8_t>((37 * i + 11 * k) % 256);
    switch (t.dtype) {
      case DType::f32:
        t.as<float>()[i] =
            (static_cast<float>(i) - static_cast<float>(n / 2)) * 0.01f + static_cast<float>(k);
        break;
      case DType::bf16:
        t.as<uint16_t>()[i] = f32_to_bf16(half_step);
        break;
      case DType::f16:
        t.as<uint16_t>()[i] = f32_to_f16(half_step);
        break;
      case DType::e4m3:
      case DType::e5m2:
      case DType::e8m0:
      case DType::u8:
        t.as<uint8_t>()[i] = code;
        break;
      case DType::i32:
        t.as<int32_t>()[i] = static_cast<int32_t>(100003 * i - 700000 + k);
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_FILE\n", argv[0]);
    return 2;
  }
  // Not sorted by element size on purpose: the writer must pack and align them itself.
  const std::vector<Spec> specs = {
      {"model.layers.0.mlp.up_proj.weight_scale_inv", DType::e8m0, {3, 5, 7}},
      {"model.embed_tokens.weight", DType::bf16, {32, 24}},
      {"model.layers.0.self_attn.q_proj.weight", DType::e4m3, {24, 24}},
      {"model.layers.0.input_layernorm.weight", DType::f32, {24}},
      {"model.layers.0.self_attn.k_proj.weight", DType::e5m2, {8, 24}},
      {"model.layers.0.self_attn.v_proj.weight", DType::f16, {8, 24}},
      {"model.layers.0.self_attn.q_proj.input_scale", DType::f32, {}},
      {"model.layers.0.mlp.gate_proj.weight", DType::f16, {2, 1, 3, 5}},
      {"model.layers.0.mlp.down_proj.weight", DType::u8, {7}},
      {"token_ids", DType::i32, {5, 3}},
      {"model.norm.weight", DType::bf16, {0}},
      {"lm_head.weight", DType::f32, {3, 0}},
  };
  try {
    std::vector<Buffer> buffers;
    std::vector<NamedTensor> tensors;
    for (size_t k = 0; k < specs.size(); ++k) {
      buffers.push_back(Buffer::for_tensor(Device::cpu(), specs[k].dtype, specs[k].shape));
      const Tensor t = buffers.back().tensor(specs[k].dtype, specs[k].shape);
      fill(t, static_cast<int64_t>(k));
      tensors.push_back({specs[k].name, t});
    }
    save_safetensors(argv[1], tensors, {{"format", "pt"}, {"producer", "octet"}});
  } catch (const Error& e) {
    std::fprintf(stderr, "write_safetensors: %s\n", e.what());
    return 1;
  }
  return 0;
}
