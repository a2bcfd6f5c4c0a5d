// data/shard.cpp: token shard files: header encoding and checks, the writer (through
// io/atomic_file) and the memory-mapped reader.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "io/atomic_file.h"

namespace octet::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "shards store little-endian tokens; a big-endian host needs byte swaps here");

// Closes a POSIX file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string printable(const unsigned char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (p[i] >= 0x20 && p[i] < 0x7F) ? static_cast<char>(p[i]) : '?';
  return s;
}

// Checks the 64 header bytes of `path` against the file's size.
ShardHeader parse_header(const std::string& path, const unsigned char* b, uint64_t file_bytes) {
  OCTET_CHECK(std::memcmp(b, kShardMagic, 8) == 0, "shard", path, ": magic '", printable(b, 8),
              "' is not 'OCTETTOK'; this is not an octet token shard");
  ShardHeader h;
  h.version = get_u32(b + 8);
  h.token_bytes = get_u32(b + 12);
  h.count = get_u64(b + 16);
  h.vocab_size = get_u32(b + 24);
  OCTET_CHECK(h.version == kShardVersion, "shard", path, ": version ", h.version,
              " is not supported; this build reads version ", kShardVersion);
  OCTET_CHECK(h.token_bytes == 2 || h.token_bytes == 4, "shard", path, ": token_bytes ",
              h.token_bytes, " is not 2 or 4");
  OCTET_CHECK(h.vocab_size > 0, "shard", path,
              ": vocab_size is 0; the writer must record the vocabulary");
  const uint64_t max_count =
      (std::numeric_limits<uint64_t>::max() - kShardHeaderBytes) / h.token_bytes;
  if (h.count > max_count)
    OCTET_FAIL("shard", path, ": size ", file_bytes, " bytes disagrees with the header (count ",
               h.count, " tokens of ", h.token_bytes, " bytes overflows 64 bits)");
  const uint64_t expected = kShardHeaderBytes + h.token_bytes * h.count;
  OCTET_CHECK(file_bytes == expected, "shard", path, ": size ", file_bytes,
              " bytes disagrees with the header (", kShardHeaderBytes, " + ", h.token_bytes, " x ",
              h.count, " = ", expected, ")");
  return h;
}

// Opens `path` and returns its checked header; `fd` keeps the file open for mapping.
ShardHeader open_checked(const std::string& path, Fd& fd) {
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OCTET_CHECK(fd.fd >= 0, "shard", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  OCTET_CHECK(::fstat(fd.fd, &st) == 0, "shard", path, ": cannot stat: ", std::strerror(errno));
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  OCTET_CHECK(file_bytes >= kShardHeaderBytes, "shard", path, ": file is ", file_bytes,
              " bytes, shorter than the ", kShardHeaderBytes, "-byte header (truncated?)");
  unsigned char b[kShardHeaderBytes];
  OCTET_CHECK(::pread(fd.fd, b, sizeof b, 0) == static_cast<ssize_t>(sizeof b), "shard", path,
              ": cannot read the header: ", std::strerror(errno));
  return parse_header(path, b, file_bytes);
}

}  // namespace

void shard_write(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size,
                 uint32_t token_bytes) {
  if (token_bytes == 0) token_bytes = shard_token_bytes_for(vocab_size);
  OCTET_CHECK(token_bytes == 2 || token_bytes == 4, "shard", path, ": token_bytes ", token_bytes,
              " is not 2 or 4");
  OCTET_CHECK(vocab_size > 0, "shard", path, ": vocab_size must be positive");
  OCTET_CHECK(token_bytes == 4 || vocab_size <= 65536, "shard", path, ": vocab_size ", vocab_size,
              " does not fit 2-byte tokens; use token_bytes 4");
  for (size_t i = 0; i < tokens.size(); ++i)
    OCTET_CHECK(tokens[i] >= 0 && static_cast<uint32_t>(tokens[i]) < vocab_size, "shard", path,
                ": token ", tokens[i], " at index ", i, " is beyond the vocabulary (", vocab_size,
                ")");

  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kShardMagic, 8);
  put_u32(header + 8, kShardVersion);
  put_u32(header + 12, token_bytes);
  put_u64(header + 16, tokens.size());
  put_u32(header + 24, vocab_size);

  // Crash-safe: a temporary beside `path`, fsync, rename (io/atomic_file.h).
  AtomicFile file(path);
  file.write(header, sizeof header);
  // Tokens go out in chunks through a small staging buffer (narrowed to 16 bits when asked).
  constexpr size_t kChunk = 1 << 16;
  std::vector<unsigned char> staging(kChunk * token_bytes);
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, tokens.size() - begin);
    for (size_t i = 0; i < n; ++i) {
      const auto v = static_cast<uint32_t>(tokens[begin + i]);
      if (token_bytes == 2) {
        const auto v16 = static_cast<uint16_t>(v);
        std::memcpy(&staging[2 * i], &v16, 2);
      } else {
        std::memcpy(&staging[4 * i], &v, 4);
      }
    }
    file.write(staging.data(), n * token_bytes);
  }
  file.commit();
}

ShardHeader shard_read_header(const std::string& path) {
  Fd fd(-1);
  return open_checked(path, fd);
}

std::vector<int32_t> shard_read(const std::string& path, bool check_vocab) {
  ShardView view(path);
  std::vector<int32_t> tokens(static_cast<size_t>(view.count()));
  view.read(0, tokens, check_vocab);
  return tokens;
}

ShardView::ShardView(const std::string& path) : path_(path) {
  Fd fd(-1);
  header_ = open_checked(path, fd);
  map_bytes_ = static_cast<size_t>(kShardHeaderBytes + header_.token_bytes * header_.count);
  void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  OCTET_CHECK(m != MAP_FAILED, "shard", path, ": cannot map ", map_bytes_,
              " bytes: ", std::strerror(errno));
  map_ = static_cast<const unsigned char*>(m);
}

ShardView::~ShardView() {
  release();
}

void ShardView::release() noexcept {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

ShardView::ShardView(ShardView&& other) noexcept
    : path_(std::move(other.path_)),
      header_(other.header_),
      map_(other.map_),
      map_bytes_(other.map_bytes_) {
  other.map_ = nullptr;
  other.map_bytes_ = 0;
}

ShardView& ShardView::operator=(ShardView&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    header_ = other.header_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

void ShardView::read(uint64_t begin, std::span<int32_t> out, bool check_vocab) const {
  OCTET_CHECK(begin <= header_.count && out.size() <= header_.count - begin, "shard", path_,
              ": read of tokens [", begin, ", ", begin + out.size(), ") is beyond its ",
              header_.count, " tokens");
  const unsigned char* p = map_ + kShardHeaderBytes + begin * header_.token_bytes;
  uint32_t max_token = 0;  // one comparison per call instead of one branch per token
  const uint32_t vocab = header_.vocab_size;
  if (header_.token_bytes == 2) {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
      max_token = std::max<uint32_t>(max_token, v);
    }
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = static_cast<int32_t>(v);
      max_token = std::max(max_token, v);
    }
  }
  if (!check_vocab || max_token < vocab || out.empty()) return;
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t v =
        header_.token_bytes == 2 ? static_cast<uint16_t>(out[i]) : static_cast<uint32_t>(out[i]);
    OCTET_CHECK(v < vocab, "shard", path_, ": token ", v, " at index ", begin + i,
                " is beyond the vocabulary (", vocab, ")");
  }
}

}  // namespace octet::data
