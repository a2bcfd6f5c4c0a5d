// tests/tools/llama_forward.cpp: runs octet's forward pass on a checkpoint for the
// Python reference tests: llama_forward STEP_DIR BATCH_BIN LOGITS_OUT B S [precision]
// BATCH_BIN holds i32 inputs [B, S] then targets [B, S]; LOGITS_OUT receives f32 [B*S, V];
// the mean loss is printed as JSON.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "io/json.h"
#include "model/llama.h"
#include "train/checkpoint.h"

int main(int argc, char** argv) {
  try {
    OCTET_CHECK(argc >= 6, "llama_forward",
                "usage: llama_forward STEP_DIR BATCH_BIN LOGITS_OUT B S [fp32|bf16|fp8]");
    const std::string dir = argv[1];
    const int64_t b = std::stoll(argv[4]), s = std::stoll(argv[5]);
    const std::string config_path = dir + "/config.json";
    const auto config =
        octet::model::llama_config_from_json(octet::read_json_file(config_path), config_path);
    octet::model::ModelOptions options;
    options.precision = octet::nn::precision_from_name(argc > 6 ? argv[6] : "fp32");
    options.batch = b;
    options.seq_len = s;
    octet::model::Llama model(config, options);
    octet::train::load_model_weights(dir, model);

    std::vector<int32_t> batch(static_cast<size_t>(2 * b * s));
    std::ifstream in(argv[2], std::ios::binary);
    in.read(reinterpret_cast<char*>(batch.data()), static_cast<std::streamsize>(batch.size() * 4));
    OCTET_CHECK(in.gcount() == static_cast<std::streamsize>(batch.size() * 4), "llama_forward",
                argv[2], ": expected ", batch.size() * 4, " bytes");
    const octet::Tensor inputs(batch.data(), octet::DType::i32, {b, s});
    const octet::Tensor targets(batch.data() + b * s, octet::DType::i32, {b, s});
    const float loss = model.forward(inputs, targets, 0.0f);

    const octet::Tensor logits = model.logits();
    std::vector<float> out(static_cast<size_t>(logits.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = logits.dtype == octet::DType::bf16
                   ? octet::bf16_to_f32(logits.as<const uint16_t>()[i])
                   : logits.as<const float>()[i];
    }
    std::ofstream o(argv[3], std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()),
            static_cast<std::streamsize>(out.size() * 4));
    std::printf("%s\n", octet::json_dump({{"loss", octet::json_finite_or_null(loss)}}).c_str());
    return 0;
  } catch (const octet::Error& e) {
    std::fprintf(stderr, "llama_forward: %s\n", e.what());
    return 2;
  }
}
