// data/tokenizer.h: text <-> token ids through SentencePiece (Debian's libsentencepiece),
// training a tokenizer from text files, and turning text files into token shards.
// defines: tokenizer_available, kShardTokenizerFile, Tokenizer, TokenizerTrainOptions,
// tokenizer_train,
//          DocumentSplit, document_split_from_name, TextShardOptions, TextShardSummary,
//          tokenize_files_to_shards
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace octet::data {

// True when this build links SentencePiece; without it every function below that needs
// it throws "[tokenizer] octet was built without SentencePiece; install libsentencepiece-dev".
bool tokenizer_available();

// The file name under which a shard directory (octet tokenize) and a checkpoint carry the
// tokenizer of their tokens (the name Hugging Face's LlamaTokenizer looks for).
inline constexpr const char* kShardTokenizerFile = "tokenizer.model";

// A loaded SentencePiece model (an octet-trained one or an existing one such as LLaMA's
// tokenizer.model). Move-only.
class Tokenizer {
 public:
  // Loads `model_path`; throws octet::Error naming the file when it is missing or invalid.
  static Tokenizer load(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the ids of `text` to `out` (for encoding many documents into one buffer).
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids) const;

  int vocab_size() const;
  int bos_id() const;  // -1 when the model has no such piece
  int eos_id() const;
  int unk_id() const;
  const std::string& path() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence per line
  std::string model_prefix;         // writes <prefix>.model and <prefix>.vocab
  int vocab_size = 8000;
  std::string model_type = "bpe";   // "bpe" or "unigram"
  double character_coverage = 1.0;  // share of characters kept; 1.0 suits small corpora
  bool byte_fallback = false;       // unknown characters become bytes (needs vocab > 259)
  int64_t input_sentence_size = 0;  // sample this many lines (0: all)
  int threads = 0;                  // 0: the machine's cores
  bool quiet = true;                // hide SentencePiece's progress log
};

// Trains a SentencePiece model (pieces: unk 0, bos 1, eos 2). Throws octet::Error naming
// a missing input or what SentencePiece reported.
void tokenizer_train(const TokenizerTrainOptions& options);

// How text files are cut into documents; an eos id follows every document.
enum class DocumentSplit {
  file,   // each file is one document
  blank,  // documents are separated by blank lines
  line,   // each non-empty line is a document
};
DocumentSplit document_split_from_name(std::string_view name);  // "file", "blank", "line"

struct TextShardOptions {
  std::vector<std::string> inputs;     // text files
  std::string output_dir;              // created when missing
  int64_t shard_tokens = 100'000'000;  // tokens per shard (the last one holds the rest)
  DocumentSplit split = DocumentSplit::blank;
  int64_t val_tokens = 0;  // the first documents, until this many tokens, go to val_NNN.bin
};

struct TextShardSummary {
  int64_t documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> train_shards, val_shards;
};

// Encodes text files into token shards <output_dir>/train_000.bin, ... (and val_000.bin,
// ... when val_tokens > 0), eos after each document. Lines within a document are joined
// with '\n' (what the model makes of a newline is its own business: LLaMA's keeps it as a
// byte, a default octet model turns it into a space).
TextShardSummary tokenize_files_to_shards(const Tokenizer& tokenizer,
                                          const TextShardOptions& options);

}  // namespace octet::data
