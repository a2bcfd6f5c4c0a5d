// io/json.h: a small JSON value (objects keep insertion order, integers stay exact), a strict
// parser whose errors name the source, line and column, a writer that round-trips numbers, and
// typed field readers for configs whose errors name the file and the field.
// defines: Json, JsonType, json_type_name, parse_json, read_json_file, write_json_file,
//          get_int, get_number, get_string, get_bool, get_object, get_array, get_int_or,
//          get_number_or, get_string_or, get_bool_or, check_known_keys
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace octet {

enum class JsonType : uint8_t { null, boolean, number, string, array, object };
const char* json_type_name(JsonType type);  // "null", "boolean", "number", ...

// One JSON value. Numbers keep an exact int64 when they were written or parsed as an integer
// (no fraction, no exponent, within int64), and a double otherwise. Objects are ordered lists
// of members with unique keys; lookups are linear, which suits configs and headers.
class Json {
 public:
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool value) : value_(value) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) Json(T value) : value_(make_int(value)) {}
  Json(double value) : value_(Number{value, 0, false}) {}
  Json(float value) : Json(static_cast<double>(value)) {}
  Json(std::string value) : value_(std::move(value)) {}
  Json(std::string_view value) : value_(std::string(value)) {}
  Json(const char* value) : value_(std::string(value)) {}

  static Json array(Array items = {});
  static Json object();  // an empty object; add members with set()

  JsonType type() const { return static_cast<JsonType>(value_.index()); }
  bool is_null() const { return type() == JsonType::null; }
  bool is_bool() const { return type() == JsonType::boolean; }
  bool is_number() const { return type() == JsonType::number; }
  // A number held as an exact int64.
  bool is_int() const { return is_number() && std::get<Number>(value_).is_int; }
  // An exact integer, or a double with an integral value of magnitude <= 2^53: what as_int()
  // accepts.
  bool is_integral() const;
  bool is_string() const { return type() == JsonType::string; }
  bool is_array() const { return type() == JsonType::array; }
  bool is_object() const { return type() == JsonType::object; }

  // Typed access; each throws octet::Error naming the expected and the actual type.
  bool as_bool() const;
  double as_number() const;  // any number
  int64_t as_int() const;    // throws unless is_integral()
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();  // appending directly is allowed; keys must stay unique (or use set())

  // Number of elements of an array or members of an object (throws for other types).
  size_t size() const;
  void push_back(Json value);                    // arrays only
  const Json& operator[](size_t i) const;        // arrays only; throws when out of range
  const Json* find(std::string_view key) const;  // objects only; nullptr when absent
  Json* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Json& at(std::string_view key) const;  // throws naming the missing key
  // Replaces the member `key` in place, or appends it; returns the stored value.
  Json& set(std::string_view key, Json value);

  // JSON text: compact when indent < 0, else pretty with `indent` spaces per level (arrays of
  // scalars stay on one line). Doubles print in shortest round-trip form and keep a '.0' or an
  // exponent so they parse back as doubles; integers print exactly. Throws for NaN/Inf
  // (JSON has neither) and for strings that are not valid UTF-8.
  std::string dump(int indent = -1) const;

  // Deep equality; numbers compare by value (1 == 1.0), objects ignore member order.
  friend bool operator==(const Json& a, const Json& b);

 private:
  struct Number {
    double value;
    int64_t exact;  // meaningful when is_int
    bool is_int;
    friend bool operator==(const Number&, const Number&) = default;  // see operator== below
  };
  template <typename T>
  static Number make_int(T value) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) check_uint(value);
    return Number{static_cast<double>(value), static_cast<int64_t>(value), true};
  }
  static void check_uint(uint64_t value);  // throws above INT64_MAX

  std::variant<std::nullptr_t, bool, Number, std::string, Array, Object> value_;
};

// Parses one JSON document (RFC 8259, nothing more: no comments, trailing commas, NaN, leading
// zeros, unescaped control characters or invalid UTF-8; duplicate keys are an error). `source`
// names the text in errors: "[json] config.json:3:14: expected ',' or '}', found ']'".
Json parse_json(std::string_view text, std::string_view source = "<string>");
// Reads and parses a file; errors name the path.
Json read_json_file(const std::string& path);
// Writes dump(indent) plus a newline atomically (io/atomic_file.h).
void write_json_file(const std::string& path, const Json& value, int indent = 2);

// Typed fields of a JSON object, for configs. `where` names the object in errors, e.g.
// "config.json" or "config.json: model"; the message then starts with "[json] ". When `where`
// starts with '[' it is the whole prefix ("[config] config.json") and is used verbatim:
//   [config] config.json: missing field 'hidden_size'
//   [config] config.json: field 'hidden_size' must be an integer, got "64" (string)
// The required variants throw when the field is absent; the *_or variants return `fallback`
// when it is absent or null, and still throw when it has the wrong type.
int64_t get_int(const Json& obj, std::string_view key, std::string_view where);
double get_number(const Json& obj, std::string_view key, std::string_view where);
std::string get_string(const Json& obj, std::string_view key, std::string_view where);
bool get_bool(const Json& obj, std::string_view key, std::string_view where);
const Json& get_object(const Json& obj, std::string_view key, std::string_view where);
const Json& get_array(const Json& obj, std::string_view key, std::string_view where);
int64_t get_int_or(const Json& obj, std::string_view key, int64_t fallback, std::string_view where);
double get_number_or(const Json& obj, std::string_view key, double fallback,
                     std::string_view where);
std::string get_string_or(const Json& obj, std::string_view key, std::string_view fallback,
                          std::string_view where);
bool get_bool_or(const Json& obj, std::string_view key, bool fallback, std::string_view where);

// Throws for the first member of `obj` whose key is not in `allowed`, listing the known fields
// and the closest one: "[json] config.json: unknown field 'hiden_size' (did you mean
// 'hidden_size'?); known fields: dim, hidden_size, n_layers".
void check_known_keys(const Json& obj, std::initializer_list<std::string_view> allowed,
                      std::string_view where);

}  // namespace octet
