// train/run_links.cpp
#include "train/run_links.h"

#include <unistd.h>

#include <filesystem>

#include "core/error.h"

namespace octet::train {
namespace fs = std::filesystem;

void link_latest_files(const std::string& dir, const std::string& step_name) {
  for (const char* file : kRunLinkedFiles) {
    const fs::path link = fs::path(dir) / file;
    std::error_code ec;
    const bool is_link = fs::is_symlink(link, ec);
    if (!is_link && fs::exists(link, ec)) continue;  // a file of the user's: left alone
    const fs::path target = fs::path(step_name) / file;
    if (!fs::exists(fs::path(dir) / target, ec)) {
      if (is_link) fs::remove(link, ec);
      continue;
    }
    // A new link under a temporary name, renamed over the old one: readers see either.
    const fs::path temp =
        fs::path(dir) / ("." + std::string(file) + ".tmp-" + std::to_string(::getpid()));
    fs::remove(temp, ec);
    fs::create_symlink(target, temp, ec);
    OCTET_CHECK(!ec, "checkpoint", "cannot create the link ", temp.string(), ": ", ec.message());
    fs::rename(temp, link, ec);
    OCTET_CHECK(!ec, "checkpoint", "cannot rename ", temp.string(), " to ", link.string(), ": ",
                ec.message());
  }
}

}  // namespace octet::train
