// data/tokenizer.cpp: the backend-independent part of the tokenizer: text files to
// token shards on top of Tokenizer::encode.
#include "data/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/shard.h"

namespace octet::data {
namespace {

// Accumulates one split's tokens and writes a shard whenever `shard_tokens` are ready.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int64_t shard_tokens, uint32_t vocab)
      : dir_(std::move(dir)),
        split_(std::move(split)),
        shard_tokens_(shard_tokens),
        vocab_(vocab) {}

  std::vector<int32_t>& buffer() { return buffer_; }
  void flush(bool all, std::vector<std::string>& written, int64_t& total) {
    while (static_cast<int64_t>(buffer_.size()) >= shard_tokens_ || (all && !buffer_.empty())) {
      const size_t n = std::min(buffer_.size(), static_cast<size_t>(shard_tokens_));
      char name[64];
      std::snprintf(name, sizeof name, "%s_%03d.bin", split_.c_str(), index_++);
      const std::string path = (std::filesystem::path(dir_) / name).string();
      shard_write(path, std::span<const int32_t>(buffer_.data(), n), vocab_);
      written.push_back(path);
      total += static_cast<int64_t>(n);
      buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }

 private:
  std::string dir_, split_;
  int64_t shard_tokens_;
  uint32_t vocab_;
  std::vector<int32_t> buffer_;
  int index_ = 0;
};

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
}

}  // namespace

DocumentSplit document_split_from_name(std::string_view name) {
  if (name == "file") return DocumentSplit::file;
  if (name == "blank") return DocumentSplit::blank;
  if (name == "line") return DocumentSplit::line;
  OCTET_FAIL("tokenizer", "unknown document split '", name, "'; use file, blank or line");
}

TextShardSummary tokenize_files_to_shards(const Tokenizer& tokenizer,
                                          const TextShardOptions& options) {
  OCTET_CHECK(!options.inputs.empty(), "tokenizer", "no input files given");
  OCTET_CHECK(options.shard_tokens >= 1, "tokenizer", "shard_tokens must be positive, got ",
              options.shard_tokens);
  OCTET_CHECK(options.val_tokens >= 0, "tokenizer", "val_tokens must be non-negative");
  for (const std::string& input : options.inputs)
    OCTET_CHECK(std::filesystem::is_regular_file(input), "tokenizer", "input file '", input,
                "' does not exist");
  const int eos = tokenizer.eos_id();
  OCTET_CHECK(eos >= 0, "tokenizer", tokenizer.path(),
              " has no eos piece to separate documents with");
  std::error_code ec;
  std::filesystem::create_directories(options.output_dir, ec);
  OCTET_CHECK(!ec && std::filesystem::is_directory(options.output_dir), "tokenizer",
              "cannot create the output directory '", options.output_dir, "': ", ec.message());

  const auto vocab = static_cast<uint32_t>(tokenizer.vocab_size());
  ShardSink train(options.output_dir, "train", options.shard_tokens, vocab);
  ShardSink val(options.output_dir, "val", options.shard_tokens, vocab);
  TextShardSummary summary;
  int64_t val_taken = 0;  // tokens routed to val so far (written or buffered)
  std::string document;
  bool has_text = false;

  auto end_document = [&] {
    if (!has_text) return;
    const bool to_val = val_taken < options.val_tokens;
    std::vector<int32_t>& out = to_val ? val.buffer() : train.buffer();
    const size_t before = out.size();
    tokenizer.encode_append(document, out);
    out.push_back(eos);
    if (to_val) {
      val_taken += static_cast<int64_t>(out.size() - before);
      val.flush(false, summary.val_shards, summary.val_tokens);
    } else {
      train.flush(false, summary.train_shards, summary.train_tokens);
    }
    ++summary.documents;
    document.clear();
    has_text = false;
  };

  for (const std::string& input : options.inputs) {
    std::ifstream in(input, std::ios::binary);
    OCTET_CHECK(in.good(), "tokenizer", "cannot read input file '", input, "'");
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (options.split != DocumentSplit::file && is_blank(line)) {
        end_document();
        continue;
      }
      if (options.split == DocumentSplit::line) {
        document = line;
        has_text = true;
        end_document();
        continue;
      }
      if (has_text) document += '\n';
      document += line;
      has_text = has_text || !is_blank(line);
    }
    OCTET_CHECK(in.eof(), "tokenizer", "error while reading '", input, "'");
    end_document();  // a document never spans two files
  }
  val.flush(true, summary.val_shards, summary.val_tokens);
  train.flush(true, summary.train_shards, summary.train_tokens);
  OCTET_CHECK(summary.train_tokens > 0, "tokenizer", "the inputs hold no text for the train split",
              options.val_tokens > 0
                  ? " (--val-tokens " + std::to_string(options.val_tokens) +
                        " is not below the inputs' " + std::to_string(summary.val_tokens) +
                        " tokens, so all of them went to val; lower --val-tokens)"
                  : std::string());
  return summary;
}

}  // namespace octet::data
