// io/json.h: JSON through nlohmann-json: a strict parser whose errors name the source, line
// and column, a writer that refuses what JSON cannot hold, and whole files.
// defines: Json, parse_json, read_json_file, write_json_file, json_dump, json_finite_or_null
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/json_fwd.h"

namespace octet {

// Parses one JSON document (RFC 8259, nothing more: no comments, trailing commas, NaN,
// numbers beyond a double's range or invalid UTF-8; duplicate keys and nesting deeper than
// 256 levels are errors too). `source` names the text in errors:
//   [json] config.json:4:5: syntax error while parsing object - unexpected string literal; ...
// (the line and column, from 1 in bytes, where the parser stopped: the end of the token at
// fault).
Json parse_json(std::string_view text, std::string_view source = "<string>");
// Reads and parses a file; errors name the path.
Json read_json_file(const std::string& path);

// JSON text: compact when indent < 0, else pretty with `indent` spaces per level. Doubles
// print in shortest round-trip form (with a ".0" when integral); integers print exactly.
// Throws octet::Error for NaN/Inf (JSON has neither: write null where a value may be
// missing) and for strings that are not valid UTF-8.
std::string json_dump(const Json& value, int indent = -1);
// x, or null where x is NaN or infinite: for records whose numbers may be missing.
Json json_finite_or_null(double x);
// Writes json_dump(value, indent) plus a newline atomically (io/atomic_file.h).
void write_json_file(const std::string& path, const Json& value, int indent = 2);

}  // namespace octet
