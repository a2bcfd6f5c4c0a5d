// io/atomic_file.h: whole-file reads and crash-safe writes (temporary file, fsync, rename), so
// that a failed or interrupted write never damages the last good file.
// defines: AtomicFile, write_file_atomic, read_file, read_text_file
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace octet {

// Writes `path` atomically: bytes go to `path + ".tmp.<pid>"` in the same directory, and
// commit() flushes and fsyncs that file, renames it over `path` and fsyncs the directory.
// Readers see the old file or the complete new one, never a mix, even after a crash.
// Destroying an AtomicFile that was not committed (an exception, an early return) removes the
// temporary file and leaves any existing `path` byte-identical. Errors throw octet::Error
// naming the path and the OS error.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates the temporary file
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Makes the written bytes the content of path(). Nothing can be written afterwards.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  size_t bytes_written() const { return bytes_written_; }

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  size_t bytes_written_ = 0;
  bool committed_ = false;
};

// Replaces `path` with `bytes` (or `text`) through an AtomicFile.
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);
void write_file_atomic(const std::string& path, std::string_view text);

// The whole content of a file; errors name the path and the OS error.
std::vector<std::byte> read_file(const std::string& path);
std::string read_text_file(const std::string& path);

}  // namespace octet
