// core/error.h: octet::Error, the one exception type, and the checks that raise it.
// defines: Error, OCTET_CHECK
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace octet {

// Every failure a caller can act on is an Error whose message starts with the
// operation in brackets and says what was expected: "[gemm] K=100 is not a multiple of 16".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Args>
[[noreturn]] void throw_error(const char* op, const Args&... args) {
  std::ostringstream os;
  os << '[' << op << "] ";
  (os << ... << args);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace octet

// OCTET_CHECK(cond, "op", message parts...): throw octet::Error("[op] message") unless cond.
#define OCTET_CHECK(cond, op, ...)                              \
  do {                                                          \
    if (!(cond)) ::octet::detail::throw_error(op, __VA_ARGS__); \
  } while (0)

// OCTET_FAIL("op", message parts...): throw unconditionally.
#define OCTET_FAIL(op, ...) ::octet::detail::throw_error(op, __VA_ARGS__)
