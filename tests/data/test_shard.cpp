// tests/data/test_shard.cpp: token shard files: round trips, the byte layout, and errors
// that name the file and the field for every way a shard can be wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "data/shard.h"
#include "temp_dir.h"
#include "testing.h"

namespace octet::data {
namespace {

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void put_u32(std::vector<unsigned char>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    b[at + static_cast<size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
}

std::vector<int32_t> random_tokens(size_t n, uint32_t vocab, uint64_t seed) {
  testing::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  t.front() = static_cast<int32_t>(vocab - 1);  // the extremes of the range
  t.back() = 0;
  return t;
}

// Runs `f`, which must throw octet::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Shard, RoundTripsTwoByteTokens) {
  testing::TempDir dir;
  const std::string path = dir.file("train_000.bin");
  const auto tokens = random_tokens(100003, 65536, testing::fresh_seed());
  shard_write(path, tokens, 65536);
  const ShardHeader h = shard_read_header(path);
  EXPECT_EQ(h.version, 1u);
  EXPECT_EQ(h.token_bytes, 2u);  // chosen from the vocabulary
  EXPECT_EQ(h.count, tokens.size());
  EXPECT_EQ(h.vocab_size, 65536u);
  EXPECT_EQ(std::filesystem::file_size(path), 64 + 2 * tokens.size());
  EXPECT_EQ(shard_read(path), tokens);
}

TEST(Shard, RoundTripsFourByteTokens) {
  testing::TempDir dir;
  const std::string path = dir.file("train_000.bin");
  const auto tokens = random_tokens(5001, 200000, testing::fresh_seed());
  shard_write(path, tokens, 200000);
  EXPECT_EQ(shard_read_header(path).token_bytes, 4u);
  EXPECT_EQ(std::filesystem::file_size(path), 64 + 4 * tokens.size());
  EXPECT_EQ(shard_read(path), tokens);
  // A small vocabulary written 4 bytes wide on request reads back the same.
  const auto small = random_tokens(777, 300, 1);
  shard_write(path, small, 300, 4);  // overwrites the shard in place
  EXPECT_EQ(shard_read_header(path).token_bytes, 4u);
  EXPECT_EQ(shard_read(path), small);
}

TEST(Shard, RoundTripsAnEmptyShardAndPartialReads) {
  testing::TempDir dir;
  shard_write(dir.file("empty.bin"), {}, 10);
  EXPECT_EQ(shard_read_header(dir.file("empty.bin")).count, 0u);
  EXPECT_TRUE(shard_read(dir.file("empty.bin")).empty());

  const auto tokens = random_tokens(1000, 500, 2);
  shard_write(dir.file("a.bin"), tokens, 500);
  const ShardView view(dir.file("a.bin"));
  std::vector<int32_t> part(100);
  view.read(450, part);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), tokens.begin() + 450));
  expect_error([&] { view.read(950, part); }, {"[shard]", "a.bin", "[950, 1050)", "1000 tokens"});
}

// The layout is a file format other programs read: pin every field's offset.
TEST(Shard, HeaderHasTheDocumentedLayout) {
  testing::TempDir dir;
  const std::string path = dir.file("a.bin");
  shard_write(path, std::vector<int32_t>{1, 258, 3}, 32000);
  const auto b = read_bytes(path);
  ASSERT_EQ(b.size(), 64u + 6u);
  EXPECT_EQ(std::memcmp(b.data(), "OCTETTOK", 8), 0);
  const std::vector<unsigned char> fields(b.begin() + 8, b.begin() + 28);
  const std::vector<unsigned char> want = {
      1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x7D, 0, 0};  // 1, 2, 3 (u64), 32000
  EXPECT_EQ(fields, want);
  for (size_t i = 28; i < 64; ++i) EXPECT_EQ(b[i], 0) << "reserved byte " << i;
  const std::vector<unsigned char> tokens(b.begin() + 64, b.end());
  EXPECT_EQ(tokens, (std::vector<unsigned char>{1, 0, 2, 1, 3, 0}));  // little-endian u16
}

TEST(Shard, WriterLeavesNoTemporaryBehind) {
  testing::TempDir dir;
  shard_write(dir.file("a.bin"), random_tokens(10, 50, 3), 50);
  shard_write(dir.file("a.bin"), random_tokens(20, 50, 4), 50);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"a.bin"});
  EXPECT_EQ(shard_read_header(dir.file("a.bin")).count, 20u);
}

TEST(Shard, WriterRejectsTokensOutsideTheVocabulary) {
  testing::TempDir dir;
  const std::string path = dir.file("a.bin");
  expect_error(
      [&] {
        shard_write(path, std::vector<int32_t>{1, 2, 70000}, 32000);
      },
      {"[shard]", path, "token 70000 at index 2 is beyond the vocabulary (32000)"});
  expect_error([&] { shard_write(path, std::vector<int32_t>{-1}, 32000); },
               {"token -1 at index 0"});
  expect_error([&] { shard_write(path, std::vector<int32_t>{1}, 70000, 2); },
               {"vocab_size 70000 does not fit 2-byte tokens"});
  expect_error([&] { shard_write(path, std::vector<int32_t>{1}, 100, 3); },
               {"token_bytes 3 is not 2 or 4"});
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing half-written
  expect_error([&] { shard_write(dir.file("no/such/dir/a.bin"), std::vector<int32_t>{1}, 100); },
               {"no/such/dir/a.bin", "cannot create"});
}

class ShardCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("train_000.bin");
    tokens_ = random_tokens(500, 32000, 5);
    shard_write(path_, tokens_, 32000);
    bytes_ = read_bytes(path_);
  }
  testing::TempDir dir_;
  std::string path_;
  std::vector<int32_t> tokens_;
  std::vector<unsigned char> bytes_;
};

TEST_F(ShardCorruption, BadMagicIsNamed) {
  bytes_[0] = 'X';
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read_header(path_); },
               {"[shard] " + path_ + ": magic 'XCTETTOK' is not 'OCTETTOK'"});
  expect_error([&] { ShardView v(path_); }, {"magic"});
}

TEST_F(ShardCorruption, BadVersionIsNamed) {
  put_u32(bytes_, 8, 2);
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read(path_); }, {"[shard] " + path_ + ": version 2 is not supported"});
}

TEST_F(ShardCorruption, BadTokenWidthIsNamed) {
  put_u32(bytes_, 12, 3);
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read(path_); }, {"[shard] " + path_ + ": token_bytes 3 is not 2 or 4"});
}

TEST_F(ShardCorruption, ZeroVocabularyIsNamed) {
  put_u32(bytes_, 24, 0);
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read(path_); }, {path_, "vocab_size is 0"});
}

TEST_F(ShardCorruption, SizeDisagreeingWithTheHeaderIsNamed) {
  bytes_.resize(bytes_.size() - 64);  // 1000 bytes instead of 1064
  write_bytes(path_, bytes_);
  expect_error(
      [&] { shard_read(path_); },
      {"[shard] " + path_ + ": size 1000 bytes disagrees with the header (64 + 2 x 500 = 1064)"});
  bytes_.resize(1064 + 1);  // one byte too many
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read_header(path_); }, {"size 1065 bytes disagrees with the header"});
}

TEST_F(ShardCorruption, TruncatedHeaderIsNamed) {
  bytes_.resize(30);
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read(path_); },
               {"[shard] " + path_ + ": file is 30 bytes, shorter than the 64-byte header"});
  write_bytes(path_, {});
  expect_error([&] { shard_read(path_); }, {"file is 0 bytes"});
}

TEST_F(ShardCorruption, TokenBeyondTheVocabularyIsNamed) {
  // Token 12 becomes 65000 in a shard whose header says the vocabulary is 32000.
  bytes_[64 + 2 * 12] = 0xE8;
  bytes_[64 + 2 * 12 + 1] = 0xFD;
  write_bytes(path_, bytes_);
  expect_error([&] { shard_read(path_); },
               {"[shard] " + path_ + ": token 65000 at index 12 is beyond the vocabulary (32000)"});
  const auto unchecked = shard_read(path_, /*check_vocab=*/false);
  EXPECT_EQ(unchecked[12], 65000);
  EXPECT_EQ(unchecked[13], tokens_[13]);
}

TEST(Shard, MissingFileIsNamed) {
  expect_error([] { shard_read_header("/nonexistent/train_000.bin"); },
               {"[shard] /nonexistent/train_000.bin: cannot open"});
}

}  // namespace
}  // namespace octet::data
