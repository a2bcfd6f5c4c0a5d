// data/tokenizer_sentencepiece.cpp: the tokenizer on top of SentencePiece (built when
// CMake finds libsentencepiece-dev; tokenizer_nosentencepiece.cpp otherwise).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer.h"

namespace octet::data {

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
  std::string path;
};

bool tokenizer_available() {
  return true;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::string& model_path) {
  OCTET_CHECK(std::filesystem::is_regular_file(model_path), "tokenizer", "model file '", model_path,
              "' does not exist");
  auto impl = std::make_unique<Impl>();
  impl->path = model_path;
  const auto status = impl->processor.Load(model_path);
  OCTET_CHECK(status.ok(), "tokenizer", model_path,
              ": not a SentencePiece model: ", status.ToString());
  return Tokenizer(std::move(impl));
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  OCTET_CHECK(status.ok(), "tokenizer", impl_->path, ": encoding failed: ", status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_append(text, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const int n = vocab_size();
  std::vector<int> v(ids.begin(), ids.end());
  for (size_t i = 0; i < v.size(); ++i)
    OCTET_CHECK(v[i] >= 0 && v[i] < n, "tokenizer", impl_->path, ": id ", v[i], " at index ", i,
                " is beyond the vocabulary (", n, ")");
  std::string text;
  const auto status = impl_->processor.Decode(v, &text);
  OCTET_CHECK(status.ok(), "tokenizer", impl_->path, ": decoding failed: ", status.ToString());
  return text;
}

int Tokenizer::vocab_size() const {
  return impl_->processor.GetPieceSize();
}
int Tokenizer::bos_id() const {
  return impl_->processor.bos_id();
}
int Tokenizer::eos_id() const {
  return impl_->processor.eos_id();
}
int Tokenizer::unk_id() const {
  return impl_->processor.unk_id();
}
const std::string& Tokenizer::path() const {
  return impl_->path;
}

void tokenizer_train(const TokenizerTrainOptions& o) {
  OCTET_CHECK(!o.inputs.empty(), "tokenizer", "no input files to train on");
  std::string inputs;
  for (const std::string& input : o.inputs) {
    OCTET_CHECK(std::filesystem::is_regular_file(input), "tokenizer", "input file '", input,
                "' does not exist");
    // SentencePiece splits --input at commas.
    OCTET_CHECK(input.find(',') == std::string::npos, "tokenizer", "input file '", input,
                "' has a comma in its name, which SentencePiece cannot take; rename it");
    inputs += (inputs.empty() ? "" : ",") + input;
  }
  OCTET_CHECK(!o.model_prefix.empty(), "tokenizer", "model_prefix is empty");
  OCTET_CHECK(o.model_type == "bpe" || o.model_type == "unigram", "tokenizer", "model_type '",
              o.model_type, "' is not bpe or unigram");
  OCTET_CHECK(o.vocab_size >= 8, "tokenizer", "vocab_size ", o.vocab_size, " is too small");
  OCTET_CHECK(!o.byte_fallback || o.vocab_size > 259, "tokenizer",
              "byte_fallback needs vocab_size > 259 (256 bytes + unk, bos, eos), got ",
              o.vocab_size);
  const std::filesystem::path dir = std::filesystem::path(o.model_prefix).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    OCTET_CHECK(!ec, "tokenizer", "cannot create '", dir.string(), "': ", ec.message());
  }
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unordered_map<std::string, std::string> kwargs = {
      {"input", inputs},
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"num_threads", std::to_string(threads)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", o.quiet ? "2" : "0"},
  };
  if (o.input_sentence_size > 0) {
    kwargs["input_sentence_size"] = std::to_string(o.input_sentence_size);
    kwargs["shuffle_input_sentence"] = "true";
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs);
  OCTET_CHECK(status.ok(), "tokenizer", "training ", o.model_prefix,
              ".model failed: ", status.ToString());
}

}  // namespace octet::data
