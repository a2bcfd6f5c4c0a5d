// tests/io/test_atomic_file.cpp: atomic replacement, abandonment, and read/write errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "temp_dir.h"
#include "testing.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_.file(name); }
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(tmp_.path())) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  testing::TempDir tmp_;  // fresh per test, removed afterwards
};

std::vector<std::byte> bytes_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return std::vector<std::byte>(p, p + s.size());
}

std::vector<std::byte> all_byte_values() {
  std::vector<std::byte> b(256 * 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 7);
  return b;
}

using testing::error_of;

TEST_F(AtomicFileTest, CommitReplacesTheFileAndLeavesNoTemporary) {
  const std::string target = path("model.safetensors");
  write_file_atomic(target, std::string_view("old contents"));
  {
    AtomicFile file(target);
    file.write(std::string_view("new "));
    file.write(bytes_of("contents"));
    EXPECT_EQ(file.bytes_written(), 12u);
    EXPECT_EQ(file.temp_path(), target + ".tmp." + std::to_string(::getpid()));
    // Until commit() readers still see the old file.
    EXPECT_EQ(read_text_file(target), "old contents");
    EXPECT_TRUE(fs::exists(file.temp_path()));
    file.commit();
    EXPECT_FALSE(fs::exists(file.temp_path()));
  }
  EXPECT_EQ(read_text_file(target), "new contents");
  EXPECT_EQ(listing(), std::set<std::string>{"model.safetensors"});
}

TEST_F(AtomicFileTest, AbandoningLeavesTheOldFileByteIdenticalAndNoTemporary) {
  const std::string target = path("ckpt.bin");
  const std::vector<std::byte> old = all_byte_values();
  write_file_atomic(target, old);
  EXPECT_THROW(
      {
        AtomicFile file(target);
        file.write(bytes_of("half of a new checkpoint"));
        throw std::runtime_error("the trainer failed mid-write");
      },
      std::runtime_error);
  EXPECT_EQ(read_file(target), old);
  EXPECT_EQ(listing(), std::set<std::string>{"ckpt.bin"});
}

TEST_F(AtomicFileTest, AbandoningWithoutAnOldFileLeavesNothing) {
  {
    AtomicFile file(path("new.bin"));
    file.write(std::string_view("x"));
    EXPECT_FALSE(listing().empty());
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(AtomicFileTest, WritingIntoAMissingDirectoryNamesThePath) {
  const std::string target = path("no/such/dir/model.safetensors");
  const std::string message = error_of([&] { write_file_atomic(target, all_byte_values()); });
  EXPECT_EQ(message.rfind("[io] ", 0), 0u) << message;
  EXPECT_NE(message.find(target), std::string::npos) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  EXPECT_TRUE(listing().empty());
}

TEST_F(AtomicFileTest, FailedRenameRemovesTheTemporaryAndKeepsTheTarget) {
  // A non-empty directory cannot be replaced by a file: rename() fails inside commit().
  const std::string target = path("occupied");
  fs::create_directories(fs::path(target) / "child");
  const std::string message = error_of([&] { write_file_atomic(target, all_byte_values()); });
  EXPECT_NE(message.find("cannot rename"), std::string::npos) << message;
  EXPECT_NE(message.find(target), std::string::npos) << message;
  EXPECT_TRUE(fs::is_directory(fs::path(target) / "child"));
  EXPECT_EQ(listing(), std::set<std::string>{"occupied"});
}

TEST_F(AtomicFileTest, WritesAfterCommitAndSecondCommitsAreErrors) {
  AtomicFile file(path("a.txt"));
  file.write(std::string_view("a"));
  file.commit();
  EXPECT_THROW(file.write(std::string_view("b")), Error);
  EXPECT_THROW(file.commit(), Error);
  EXPECT_EQ(read_text_file(path("a.txt")), "a");
}

TEST_F(AtomicFileTest, ReadFileReturnsEmptyAndLargeFilesWhole) {
  write_file_atomic(path("empty"), std::string_view());
  EXPECT_TRUE(read_file(path("empty")).empty());
  testing::Rng rng(testing::fresh_seed());
  std::vector<std::byte> large((size_t{3} << 20) + 17);
  for (std::byte& b : large) b = static_cast<std::byte>(rng());
  write_file_atomic(path("large"), large);
  EXPECT_EQ(read_file(path("large")), large);
}

TEST_F(AtomicFileTest, ReadErrorsNameThePathAndTheOsError) {
  const std::string missing = path("missing.json");
  const std::string message = error_of([&] { read_file(missing); });
  EXPECT_EQ(message, "[io] cannot open " + missing + ": No such file or directory");
  EXPECT_NE(error_of([&] { read_file(tmp_.path().string()); }).find("is a directory"),
            std::string::npos);
}

}  // namespace
}  // namespace octet
