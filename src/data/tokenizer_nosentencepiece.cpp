// data/tokenizer_nosentencepiece.cpp: the tokenizer in a build without SentencePiece:
// every entry point says how to get it.
#include "core/error.h"
#include "data/tokenizer.h"

namespace octet::data {

namespace {
[[noreturn]] void unavailable() {
  OCTET_FAIL("tokenizer", "octet was built without SentencePiece; install libsentencepiece-dev");
}
}  // namespace

struct Tokenizer::Impl {
  std::string path;
};

bool tokenizer_available() {
  return false;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::string&) {
  unavailable();
}
void Tokenizer::encode_append(std::string_view, std::vector<int32_t>&) const {
  unavailable();
}
std::vector<int32_t> Tokenizer::encode(std::string_view) const {
  unavailable();
}
std::string Tokenizer::decode(std::span<const int32_t>) const {
  unavailable();
}
int Tokenizer::vocab_size() const {
  unavailable();
}
int Tokenizer::bos_id() const {
  unavailable();
}
int Tokenizer::eos_id() const {
  unavailable();
}
int Tokenizer::unk_id() const {
  unavailable();
}
const std::string& Tokenizer::path() const {
  return impl_->path;
}

void tokenizer_train(const TokenizerTrainOptions&) {
  unavailable();
}

}  // namespace octet::data
