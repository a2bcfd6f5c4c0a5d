// io/json_fields.cpp: typed field readers and unknown-field checks for JSON configs.
#include "io/json_fields.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/strings.h"

namespace octet {
namespace {

// "[json] where: what", or "where: what" when `where` carries its own "[op]" prefix.
[[noreturn]] void fail_where(std::string_view where, const std::string& what) {
  if (!where.empty() && where.front() == '[') throw Error(std::string(where) + ": " + what);
  OCTET_FAIL("json", std::string(where), ": ", what);
}

// A short rendering of a value for error messages: "\"64\" (string)".
std::string describe(const Json& v) {
  std::string text;
  try {
    text = json_dump(v);
  } catch (const Error&) {
    text = "<not writable as JSON>";  // NaN, Inf or invalid UTF-8
  }
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text + " (" + v.type_name() + ")";
}

const Json* find_field(const Json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) fail_where(where, "expected a JSON object, got " + describe(obj));
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const Json& require_field(const Json& obj, std::string_view key, std::string_view where) {
  const Json* v = find_field(obj, key, where);
  if (v == nullptr) fail_where(where, "missing field '" + std::string(key) + "'");
  return *v;
}

[[noreturn]] void fail_type(std::string_view where, std::string_view key, const char* expected,
                            const Json& got) {
  fail_where(where,
             "field '" + std::string(key) + "' must be " + expected + ", got " + describe(got));
}

int64_t int_of(const Json& v, std::string_view key, std::string_view where) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
    return v.get<int64_t>();
  }
  // An integral double (4096.0) is an integer where it is exact: |x| <= 2^53.
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && std::trunc(x) == x && std::abs(x) <= 0x1p53) {
      return static_cast<int64_t>(x);
    }
  }
  fail_type(where, key, "an integer", v);
}
double number_of(const Json& v, std::string_view key, std::string_view where) {
  if (!v.is_number()) fail_type(where, key, "a number", v);
  return v.get<double>();
}
std::string string_of(const Json& v, std::string_view key, std::string_view where) {
  if (!v.is_string()) fail_type(where, key, "a string", v);
  return v.get<std::string>();
}
bool bool_of(const Json& v, std::string_view key, std::string_view where) {
  if (!v.is_boolean()) fail_type(where, key, "true or false", v);
  return v.get<bool>();
}

}  // namespace

int64_t get_int(const Json& obj, std::string_view key, std::string_view where) {
  return int_of(require_field(obj, key, where), key, where);
}
double get_number(const Json& obj, std::string_view key, std::string_view where) {
  return number_of(require_field(obj, key, where), key, where);
}
std::string get_string(const Json& obj, std::string_view key, std::string_view where) {
  return string_of(require_field(obj, key, where), key, where);
}
bool get_bool(const Json& obj, std::string_view key, std::string_view where) {
  return bool_of(require_field(obj, key, where), key, where);
}
const Json& get_object(const Json& obj, std::string_view key, std::string_view where) {
  const Json& v = require_field(obj, key, where);
  if (!v.is_object()) fail_type(where, key, "an object", v);
  return v;
}
const Json& get_array(const Json& obj, std::string_view key, std::string_view where) {
  const Json& v = require_field(obj, key, where);
  if (!v.is_array()) fail_type(where, key, "an array", v);
  return v;
}

int64_t get_int_or(const Json& obj, std::string_view key, int64_t fallback,
                   std::string_view where) {
  const Json* v = find_field(obj, key, where);
  return v == nullptr || v->is_null() ? fallback : int_of(*v, key, where);
}
double get_number_or(const Json& obj, std::string_view key, double fallback,
                     std::string_view where) {
  const Json* v = find_field(obj, key, where);
  return v == nullptr || v->is_null() ? fallback : number_of(*v, key, where);
}
std::string get_string_or(const Json& obj, std::string_view key, std::string_view fallback,
                          std::string_view where) {
  const Json* v = find_field(obj, key, where);
  return v == nullptr || v->is_null() ? std::string(fallback) : string_of(*v, key, where);
}
bool get_bool_or(const Json& obj, std::string_view key, bool fallback, std::string_view where) {
  const Json* v = find_field(obj, key, where);
  return v == nullptr || v->is_null() ? fallback : bool_of(*v, key, where);
}

void check_known_keys(const Json& obj, std::initializer_list<std::string_view> allowed,
                      std::string_view where) {
  if (!obj.is_object()) fail_where(where, "expected a JSON object, got " + describe(obj));
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string message = "unknown field '" + key + "'";
    const std::string closest =
        closest_name(key, std::vector<std::string>(allowed.begin(), allowed.end()));
    if (!closest.empty()) message += " (did you mean '" + closest + "'?)";
    message += "; known fields: ";
    for (auto it = allowed.begin(); it != allowed.end(); ++it) {
      if (it != allowed.begin()) message += ", ";
      message += *it;
    }
    fail_where(where, message);
  }
}

}  // namespace octet
