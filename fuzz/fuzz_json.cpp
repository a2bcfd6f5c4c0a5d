// fuzz/fuzz_json.cpp: octet's JSON reader (parse_json, read_json_file) and field getters on
// any bytes: an octet::Error, or a value whose dump parses back to the same value and whose
// fields the getters read or refuse with an octet::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "fuzz_util.h"
#include "io/json.h"
#include "io/json_fields.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Json value;
  try {
    value = parse_json(text, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  // What parses must survive a round trip unchanged.
  const Json again = parse_json(json_dump(value), "fuzz dump");
  if (again != value) std::abort();
  if (value.is_object()) {
    for (const auto& [key, field] : value.items()) {
      try {
        (void)get_int(value, key, "fuzz");
      } catch (const Error&) {
      }
      try {
        (void)get_number(value, key, "fuzz");
      } catch (const Error&) {
      }
      try {
        (void)get_string(value, key, "fuzz");
      } catch (const Error&) {
      }
      try {
        (void)get_bool(value, key, "fuzz");
      } catch (const Error&) {
      }
    }
    try {
      check_known_keys(value, {"vocab_size", "step"}, "fuzz");
    } catch (const Error&) {
    }
  }
  // The file reader too (it adds the file name to errors).
  if (size < 4096) {
    const fuzz::FuzzFile file("value.json", data, size);
    if (read_json_file(file.path()) != value) std::abort();
  }
  return 0;
}
