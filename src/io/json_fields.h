// io/json_fields.h: typed fields of a JSON object, for configs and checkpoints, whose errors
// name the file, the field and what was expected.
// defines: get_int, get_number, get_string, get_bool, get_object, get_array, get_int_or,
//          get_number_or, get_string_or, get_bool_or, check_known_keys
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "io/json.h"

namespace octet {

// `where` names the object in errors, e.g. "config.json" or "config.json: model"; the message
// then starts with "[json] ". When `where` starts with '[' it is the whole prefix
// ("[config] config.json") and is used verbatim:
//   [config] config.json: missing field 'hidden_size'
//   [config] config.json: field 'hidden_size' must be an integer, got "64" (string)
// Integers are exact JSON integers within int64, or doubles with an integral value of
// magnitude <= 2^53 (4096.0). The required variants throw when the field is absent; the
// *_or variants return `fallback` when it is absent or null, and still throw when it has
// the wrong type.
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
