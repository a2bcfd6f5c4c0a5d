// io/json_fields.cpp: typed field readers and unknown-field checks for JSON configs.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/json.h"

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
    text = v.dump();
  } catch (const Error&) {
    text = "<not writable as JSON>";  // NaN, Inf or invalid UTF-8
  }
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text + " (" + json_type_name(v.type()) + ")";
}

const Json* find_field(const Json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) fail_where(where, "expected a JSON object, got " + describe(obj));
  return obj.find(key);
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
  if (!v.is_integral()) fail_type(where, key, "an integer", v);
  return v.as_int();
}
double number_of(const Json& v, std::string_view key, std::string_view where) {
  if (!v.is_number()) fail_type(where, key, "a number", v);
  return v.as_number();
}
std::string string_of(const Json& v, std::string_view key, std::string_view where) {
  if (!v.is_string()) fail_type(where, key, "a string", v);
  return v.as_string();
}
bool bool_of(const Json& v, std::string_view key, std::string_view where) {
  if (!v.is_bool()) fail_type(where, key, "true or false", v);
  return v.as_bool();
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
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
  for (const Json::Member& m : obj.as_object()) {
    if (std::find(allowed.begin(), allowed.end(), m.first) != allowed.end()) continue;
    std::string message = "unknown field '" + m.first + "'";
    std::string_view closest;
    size_t best = 3;  // suggest only near misses (up to 2 edits)
    for (std::string_view known : allowed) {
      const size_t d = edit_distance(m.first, known);
      if (d < best) best = d, closest = known;
    }
    if (!closest.empty()) message += " (did you mean '" + std::string(closest) + "'?)";
    message += "; known fields: ";
    for (auto it = allowed.begin(); it != allowed.end(); ++it) {
      if (it != allowed.begin()) message += ", ";
      message += *it;
    }
    fail_where(where, message);
  }
}

}  // namespace octet
