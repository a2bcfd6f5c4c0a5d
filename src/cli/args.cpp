// cli/args.cpp
#include "cli/args.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace octet::cli {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string joined(const std::vector<std::string>& flags, const std::vector<std::string>& sw) {
  std::string s;
  for (const auto& f : flags) s += (s.empty() ? "--" : ", --") + f + " VALUE";
  for (const auto& f : sw) s += (s.empty() ? "--" : ", --") + f;
  return s.empty() ? "no flags" : s;
}

}  // namespace

Args::Args(std::string command, const std::vector<std::string>& args,
           const std::vector<std::string>& flags, const std::vector<std::string>& switches)
    : command_(std::move(command)) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!a.starts_with("--")) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (contains(switches, name)) {
      OCTET_CHECK(!has_value, command_.c_str(), "--", name, " takes no value");
      values_[name] = "1";
    } else if (contains(flags, name)) {
      if (!has_value) {
        OCTET_CHECK(i + 1 < args.size(), command_.c_str(), "--", name, " needs a value");
        value = args[++i];
      }
      values_[name] = value;
    } else {
      OCTET_FAIL(command_.c_str(), "unknown flag --", name,
                 "; accepted: ", joined(flags, switches));
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

long long Args::get_int(const std::string& name, long long fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  OCTET_CHECK(end && *end == '\0' && !it->second.empty(), command_.c_str(), "--", name,
              " expects an integer, got '", it->second, "'");
  return v;
}

double Args::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  OCTET_CHECK(end && *end == '\0' && !it->second.empty(), command_.c_str(), "--", name,
              " expects a number, got '", it->second, "'");
  return v;
}

std::vector<long long> Args::get_int_list(const std::string& name,
                                          const std::vector<long long>& fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::vector<long long> out;
  size_t start = 0;
  const std::string& s = it->second;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    const std::string item = s.substr(start, comma - start);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    OCTET_CHECK(!item.empty() && end && *end == '\0', command_.c_str(), "--", name,
                " expects comma-separated integers, got '", s, "'");
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace octet::cli
