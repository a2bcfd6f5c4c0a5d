// fuzz/fuzz_util.h: what the libFuzzer harnesses share: the input as a file (the readers
// under test take paths), and the one outcome a bad input may have besides success: an
// octet::Error. Any other exception escapes and libFuzzer reports it as a crash.
// defines: FuzzFile, fuzz_file_path
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace octet::fuzz {

// A path of this process under $TMPDIR (or /tmp) for `name`.
inline std::string fuzz_file_path(const std::string& name) {
  static const std::string dir = [] {
    const std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("octet_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir + "/" + name;
}

// Writes bytes to fuzz_file_path(name) for the length of one input.
class FuzzFile {
 public:
  FuzzFile(const std::string& name, const uint8_t* data, size_t size)
      : path_(fuzz_file_path(name)) {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  ~FuzzFile() { std::remove(path_.c_str()); }
  FuzzFile(const FuzzFile&) = delete;
  FuzzFile& operator=(const FuzzFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace octet::fuzz
