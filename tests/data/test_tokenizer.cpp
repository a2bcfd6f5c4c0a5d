// tests/data/test_tokenizer.cpp: SentencePiece through octet: train a tiny tokenizer,
// round-trip text, and turn text files into shards with eos between documents.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "temp_dir.h"
#include "testing.h"

namespace octet::data {
namespace {

#define OCTET_SKIP_WITHOUT_SENTENCEPIECE()                                                    \
  do {                                                                                        \
    if (!tokenizer_available())                                                               \
      GTEST_SKIP() << "octet was built without SentencePiece (install libsentencepiece-dev)"; \
  } while (0)

// A few KB of text: sentences of pseudo-words over a small syllable set (fixed seed, so
// the tokenizer trained on it is the same every run).
std::vector<std::string> make_lines(int n) {
  const char* syllables[] = {"ka", "lo", "mi",  "ne",  "ru", "sa",
                             "to", "vi", "que", "zor", "an", "el"};
  testing::Rng rng(42);
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    std::string line;
    const int words = 4 + static_cast<int>(rng() % 8);
    for (int w = 0; w < words; ++w) {
      if (w) line += ' ';
      const int parts = 1 + static_cast<int>(rng() % 3);
      for (int p = 0; p < parts; ++p) line += syllables[rng() % 12];
    }
    line += (i % 3 == 0) ? "." : ",";
    lines.push_back(line);
  }
  return lines;
}

void write_text(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << '\n';
}

std::string train_tiny(const testing::TempDir& dir, const std::string& type, int vocab) {
  write_text(dir.file("corpus.txt"), make_lines(150));
  TokenizerTrainOptions o;
  o.inputs = {dir.file("corpus.txt")};
  o.model_prefix = dir.file("tok_" + type);
  o.vocab_size = vocab;
  o.model_type = type;
  o.threads = 1;
  tokenizer_train(o);
  return o.model_prefix + ".model";
}

TEST(Tokenizer, TrainedModelRoundTripsItsTrainingText) {
  OCTET_SKIP_WITHOUT_SENTENCEPIECE();
  testing::TempDir dir;
  for (const std::string type : {"bpe", "unigram"}) {
    SCOPED_TRACE(type);
    const Tokenizer tok = Tokenizer::load(train_tiny(dir, type, 80));
    EXPECT_EQ(tok.vocab_size(), 80);
    EXPECT_EQ(tok.unk_id(), 0);
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    size_t chars = 0, ids = 0;
    for (const std::string& line : make_lines(150)) {
      const auto encoded = tok.encode(line);
      for (int32_t id : encoded) {
        ASSERT_GE(id, 3) << "unk/bos/eos inside plain text";  // character coverage 1.0: no unk
        ASSERT_LT(id, 80);
      }
      ASSERT_EQ(tok.decode(encoded), line);
      chars += line.size();
      ids += encoded.size();
    }
    // Merges were learned: fewer ids than characters (syllables are 2-3 letters).
    EXPECT_LT(static_cast<double>(ids), 0.7 * static_cast<double>(chars));
  }
}

TEST(Tokenizer, TextFilesBecomeShardsWithEosAfterEachDocument) {
  OCTET_SKIP_WITHOUT_SENTENCEPIECE();
  testing::TempDir dir;
  const Tokenizer tok = Tokenizer::load(train_tiny(dir, "bpe", 80));
  const auto lines = make_lines(40);
  // a.txt: three documents separated by blank lines; b.txt: one.
  write_text(dir.file("a.txt"),
             {lines[0], lines[1], "", lines[2], "  ", "", lines[3], lines[4], lines[5]});
  write_text(dir.file("b.txt"), {lines[6]});
  std::vector<int32_t> expected;
  int64_t first_document_tokens = 0;
  for (const std::string& doc : {lines[0] + "\n" + lines[1], lines[2],
                                 lines[3] + "\n" + lines[4] + "\n" + lines[5], lines[6]}) {
    tok.encode_append(doc, expected);
    expected.push_back(tok.eos_id());
    if (first_document_tokens == 0) first_document_tokens = static_cast<int64_t>(expected.size());
  }

  TextShardOptions o;
  o.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  o.output_dir = dir.file("shards");
  o.shard_tokens = 16;  // several shards
  const auto summary = tokenize_files_to_shards(tok, o);
  EXPECT_EQ(summary.documents, 4);
  EXPECT_EQ(summary.train_tokens, static_cast<int64_t>(expected.size()));
  ASSERT_EQ(summary.train_shards.size(), (expected.size() + 15) / 16);
  std::vector<int32_t> got;
  for (const auto& path : summary.train_shards) {
    const auto h = shard_read_header(path);
    EXPECT_EQ(h.vocab_size, 80u);
    EXPECT_EQ(h.token_bytes, 2u);
    const auto t = shard_read(path);
    got.insert(got.end(), t.begin(), t.end());
  }
  EXPECT_EQ(got, expected);
  EXPECT_TRUE(summary.train_shards.front().ends_with("train_000.bin"));

  // With val_tokens, the first document goes to val_000.bin and the rest to train.
  o.output_dir = dir.file("split");
  o.shard_tokens = 1000;
  o.val_tokens = 1;
  const auto split = tokenize_files_to_shards(tok, o);
  ASSERT_EQ(split.val_shards.size(), 1u);
  const auto val = shard_read(split.val_shards[0]);
  EXPECT_EQ(val, std::vector<int32_t>(expected.begin(), expected.begin() + first_document_tokens));
  EXPECT_EQ(shard_read(split.train_shards[0]),
            std::vector<int32_t>(expected.begin() + first_document_tokens, expected.end()));
}

TEST(Tokenizer, MissingFilesAreNamed) {
  testing::TempDir dir;
  auto expect_error = [](auto f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  if (!tokenizer_available()) {
    expect_error([] { Tokenizer::load("tok.model"); },
                 "built without SentencePiece; install libsentencepiece-dev");
    GTEST_SKIP() << "octet was built without SentencePiece (install libsentencepiece-dev)";
  }
  expect_error([&] { Tokenizer::load(dir.file("nope.model")); },
               "[tokenizer] model file '" + dir.file("nope.model") + "' does not exist");
  write_text(dir.file("garbage.model"), {"not a model"});
  expect_error([&] { Tokenizer::load(dir.file("garbage.model")); },
               "garbage.model: not a SentencePiece model");
  TokenizerTrainOptions o;
  o.inputs = {dir.file("missing.txt")};
  o.model_prefix = dir.file("tok");
  expect_error([&] { tokenizer_train(o); },
               "input file '" + dir.file("missing.txt") + "' does not exist");

  const Tokenizer tok = Tokenizer::load(train_tiny(dir, "bpe", 64));
  TextShardOptions s;
  s.inputs = {dir.file("corpus.txt"), dir.file("absent.txt")};
  s.output_dir = dir.file("out");
  expect_error([&] { tokenize_files_to_shards(tok, s); },
               "input file '" + dir.file("absent.txt") + "' does not exist");
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/train_000.bin")));  // checked before writing
}

}  // namespace
}  // namespace octet::data
