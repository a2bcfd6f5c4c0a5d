// io/atomic_file.cpp: AtomicFile on POSIX (open, fsync, rename) and whole-file reads.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "core/error.h"
#include "io/fault_injection.h"

namespace octet {
namespace {

std::string os_message(int err) {
  return std::error_code(err, std::generic_category()).message();
}

[[noreturn]] void fail_os(const std::string& what, int err) {
  OCTET_FAIL("io", what, ": ", os_message(err));
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Makes the rename itself durable. Filesystems that cannot fsync a directory say EINVAL.
void fsync_directory(const std::string& file_path) {
  const std::string dir = directory_of(file_path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail_os("cannot open directory " + dir + " to sync the rename of " + file_path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    fail_os("cannot sync directory " + dir + " after writing " + file_path, err);
  }
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  OCTET_CHECK(!path_.empty(), "io", "cannot write a file with an empty path");
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  // O_TRUNC rather than O_EXCL: a stale temporary from a crashed run with the same pid is ours.
  const int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail_os("cannot create " + temp_path_ + " to write " + path_, errno);
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp_path_.c_str());
    fail_os("cannot open a stream on " + temp_path_, err);
  }
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  OCTET_CHECK(file_ != nullptr, "io", "cannot write to ", path_,
              committed_ ? " after commit()" : " after a failed commit()");
  if (bytes == 0) return;
  if (const int err = io_fault_before_write(bytes)) {
    fail_os("writing " + temp_path_ + " (for " + path_ + ") failed", err);
  }
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    fail_os("writing " + temp_path_ + " (for " + path_ + ") failed", errno);
  }
  bytes_written_ += bytes;
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  write(bytes.data(), bytes.size());
}

void AtomicFile::commit() {
  OCTET_CHECK(file_ != nullptr, "io", "commit() of ", path_,
              committed_ ? " called twice" : " after a failed commit()");
  // From here on the stream is closed whatever happens; the destructor removes the temporary
  // unless the rename succeeded.
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fflush(file) != 0 || ::fsync(::fileno(file)) != 0) {
    const int err = errno;
    std::fclose(file);
    fail_os("writing " + temp_path_ + " (for " + path_ + ") failed", err);
  }
  if (std::fclose(file) != 0) fail_os("closing " + temp_path_ + " failed", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    fail_os("cannot rename " + temp_path_ + " to " + path_, errno);
  }
  committed_ = true;
  fsync_directory(path_);
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

void write_file_atomic(const std::string& path, std::string_view text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

std::vector<std::byte> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_os("cannot open " + path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_os("cannot stat " + path, errno);
  OCTET_CHECK(!S_ISDIR(st.st_mode), "io", "cannot read ", path, ": it is a directory");
  // The size is a hint (files in /proc say 0): read until end of file, growing past it in
  // small steps so that a large file is never held twice.
  std::vector<std::byte> bytes(static_cast<size_t>(st.st_size));
  size_t size = 0;
  while (true) {
    std::byte extra[4096];
    const bool full = size == bytes.size();
    std::byte* dst = full ? extra : bytes.data() + size;
    const ssize_t n = ::read(fd, dst, full ? sizeof extra : bytes.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_os("cannot read " + path, errno);
    if (n == 0) break;
    if (full) bytes.insert(bytes.end(), extra, extra + n);
    size += static_cast<size_t>(n);
  }
  bytes.resize(size);
  return bytes;
}

std::string read_text_file(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace octet
