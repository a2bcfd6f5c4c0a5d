// io/json_fwd.h: octet's JSON type, nlohmann-json's ordered_json, declared without the full
// library header, for headers that only pass JSON values around.
// defines: Json
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace octet {

// nlohmann-json's value with objects in insertion order; integers stay exact (int64, or
// uint64 past INT64_MAX), other numbers are doubles.
using Json = nlohmann::ordered_json;

}  // namespace octet
