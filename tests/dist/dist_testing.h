// tests/dist/dist_testing.h: what the MPI tests share: the world communicator main()
// made, and a directory path every rank agrees on.
// defines: world, shared_temp_dir
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "dist/comm.h"

namespace octet::dist::testing {

std::shared_ptr<Comm>& world();

// A fresh directory made by rank 0 under the temporary directory, its path broadcast to
// every rank; removed by rank 0 at the end (kept when a test leaves by an exception).
class SharedTempDir {
 public:
  SharedTempDir() {
    char path[512] = {};
    Comm& c = *world();
    if (c.rank() == 0) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      const auto p = std::filesystem::temp_directory_path() /
                     ("octet_dist_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
      std::filesystem::remove_all(p);
      std::filesystem::create_directories(p);
      std::strncpy(path, p.c_str(), sizeof path - 1);
    }
    c.broadcast(Tensor(path, DType::u8, {static_cast<int64_t>(sizeof path)}), 0);
    path_ = path;
  }
  ~SharedTempDir() {
    // Left by an exception: the other ranks may wait in a collective this rank never
    // reaches, so no barrier (dist_main.cpp's listener then aborts every rank).
    if (std::uncaught_exceptions() > 0) return;
    world()->barrier();
    std::error_code ec;
    if (world()->rank() == 0) std::filesystem::remove_all(path_, ec);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace octet::dist::testing
