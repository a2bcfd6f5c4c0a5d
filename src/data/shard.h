// data/shard.h: token shard files: a 64-byte header (magic, version, token width, count,
// vocabulary size) followed by the raw little-endian tokens; an atomic writer and
// readers that check the header against the file before trusting it.
// defines: kShardMagic, kShardVersion, kShardHeaderBytes, ShardHeader, shard_token_bytes_for,
//          shard_write, shard_read_header, shard_read, ShardView
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace octet::data {

// Layout, all little-endian:
//   offset 0   8 bytes  magic "OCTETTOK"
//   offset 8   u32      version (1)
//   offset 12  u32      token_bytes: 2 (u16 tokens) or 4 (u32 tokens)
//   offset 16  u64      count: number of tokens
//   offset 24  u32      vocab_size: every token is below it
//   offset 28  36 bytes reserved, zero
//   offset 64  count * token_bytes bytes of tokens
inline constexpr char kShardMagic[8] = {'O', 'C', 'T', 'E', 'T', 'T', 'O', 'K'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t count = 0;
  uint32_t vocab_size = 0;
};

// 2 when every id of the vocabulary fits in 16 bits, else 4.
inline uint32_t shard_token_bytes_for(uint32_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

// Writes `tokens` to `path` atomically (a temporary file beside it, fsync, rename), so a
// reader never sees a half-written shard. token_bytes 0 picks shard_token_bytes_for(vocab).
// Throws octet::Error naming the file when a token is outside [0, vocab_size) or does not
// fit the width, or when the file cannot be written.
void shard_write(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size,
                 uint32_t token_bytes = 0);

// Reads the header and checks it against the file: magic, version, token width, a
// positive vocabulary and file size == 64 + token_bytes x count. Errors name the file
// and the field: "[shard] a.bin: size 1000 bytes disagrees with the header (64 + 2 x 500 = 1064)".
ShardHeader shard_read_header(const std::string& path);

// The whole shard as i32, header checked as above and (when check_vocab) every token
// below vocab_size: "[shard] a.bin: token 70000 at index 12 is beyond the vocabulary (32000)".
std::vector<int32_t> shard_read(const std::string& path, bool check_vocab = true);

// A read-only memory map of one shard, its header checked on opening; tokens are read
// on demand, so shards larger than memory cost nothing until used.
class ShardView {
 public:
  explicit ShardView(const std::string& path);
  ~ShardView();
  ShardView(ShardView&& other) noexcept;
  ShardView& operator=(ShardView&& other) noexcept;
  ShardView(const ShardView&) = delete;
  ShardView& operator=(const ShardView&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  uint64_t count() const { return header_.count; }
  uint32_t vocab_size() const { return header_.vocab_size; }

  // Copies tokens [begin, begin + out.size()) into `out`; with check_vocab, each is checked
  // to be below vocab_size (an error names the file and the token's index). The range
  // must lie inside the shard.
  void read(uint64_t begin, std::span<int32_t> out, bool check_vocab = true) const;

 private:
  void release() noexcept;
  std::string path_;
  ShardHeader header_;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace octet::data
