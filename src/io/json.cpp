// io/json.cpp: the JSON value, the strict parser, the writer and the typed field readers.
#include "io/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "io/atomic_file.h"

namespace octet {
namespace {

constexpr int kMaxDepth = 256;  // deeper documents are rejected, never a stack overflow

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when it is invalid
// (overlong forms, UTF-16 surrogates and code points above U+10FFFF are invalid).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Json parse_document() {
    Json value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("expected end of input after the top-level value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& expected) const { fail_at(pos_, expected); }

  // "[json] source:line:column: <what>, found <next>" (line and column count from 1, bytes).
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line, column = 1;
      } else {
        ++column;
      }
    }
    std::string found = "end of input";
    if (at < text_.size()) {
      const unsigned char c = static_cast<unsigned char>(text_[at]);
      char buf[16];
      if (c >= 0x20 && c < 0x7F) {
        std::snprintf(buf, sizeof buf, "'%c'", c);
      } else {
        std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
      }
      found = buf;
    }
    OCTET_FAIL("json", std::string(source_), ':', line, ':', column, ": ", what, ", found ", found);
  }

  void skip_whitespace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json parse_value(int depth) {
    skip_whitespace();
    const char c = pos_ < text_.size() ? text_[pos_] : '\0';
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
      return c == '{' ? parse_object(depth + 1) : parse_array(depth + 1);
    }
    if (c == '"') return Json(parse_string());
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    fail("expected a value (an object, array, string, number, true, false or null)");
  }

  Json parse_object(int depth) {
    ++pos_;  // '{'
    Json object = Json::object();
    Json::Object& members = object.as_object();
    std::unordered_set<std::string> keys;
    skip_whitespace();
    if (peek('}')) {
      ++pos_;
      return object;
    }
    while (true) {
      skip_whitespace();
      if (!peek('"')) {
        fail(members.empty() ? "expected a string key or '}'"
                             : "expected a string key after ',' (trailing commas are not JSON)");
      }
      const size_t key_pos = pos_;
      std::string key = parse_string();
      if (!keys.insert(key).second) fail_at(key_pos, "duplicate key \"" + key + "\"");
      skip_whitespace();
      if (!peek(':')) fail("expected ':' after an object key");
      ++pos_;
      Json value = parse_value(depth);
      members.emplace_back(std::move(key), std::move(value));
      skip_whitespace();
      if (peek(',')) {
        ++pos_;
      } else if (peek('}')) {
        ++pos_;
        return object;
      } else {
        fail("expected ',' or '}'");
      }
    }
  }

  Json parse_array(int depth) {
    ++pos_;  // '['
    Json array = Json::array();
    skip_whitespace();
    if (peek(']')) {
      ++pos_;
      return array;
    }
    while (true) {
      skip_whitespace();
      if (peek(']')) fail("expected a value after ',' (trailing commas are not JSON)");
      array.push_back(parse_value(depth));
      skip_whitespace();
      if (peek(',')) {
        ++pos_;
      } else if (peek(']')) {
        ++pos_;
        return array;
      } else {
        fail("expected ',' or ']'");
      }
    }
  }

  uint32_t parse_hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++pos_) {
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected 4 hex digits after \\u");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  std::string parse_string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("expected '\"' to end the string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("expected a character; control characters must be escaped in strings");
      if (c == '\\') {
        const size_t escape_pos = pos_++;
        const char e = pos_ < text_.size() ? text_[pos_] : '\0';
        ++pos_;
        static constexpr std::string_view kEscapes = "\"\\/bfnrt";
        static constexpr std::string_view kDecoded = "\"\\/\b\f\n\r\t";
        if (const size_t k = kEscapes.find(e); k != std::string_view::npos) {
          out += kDecoded[k];
        } else if (e == 'u') {
          uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(escape_pos, "unpaired UTF-16 low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            const bool escaped = text_.substr(pos_, 2) == "\\u";
            pos_ += escaped ? 2 : 0;
            const uint32_t low = escaped ? parse_hex4() : 0;
            if (low < 0xDC00 || low > 0xDFFF) {
              fail_at(escape_pos, "expected a \\u low surrogate after a high surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
        } else {
          fail_at(escape_pos, "expected an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX");
        }
        continue;
      }
      const size_t n = utf8_sequence_length(text_, pos_);
      if (n == 0) fail("expected valid UTF-8 in a string");
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  Json parse_number() {
    const size_t start = pos_;
    bool integral = true;
    const auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek('-')) ++pos_;
    const size_t int_start = pos_;
    const size_t n_int = digits();
    if (n_int == 0) fail("expected a digit");
    if (n_int > 1 && text_[int_start] == '0') fail_at(int_start, "leading zeros are not JSON");
    if (peek('.')) {
      ++pos_, integral = false;
      if (digits() == 0) fail("expected a digit after '.'");
    }
    if (peek('e') || peek('E')) {
      ++pos_, integral = false;
      if (peek('+') || peek('-')) ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t v = 0;
      if (std::from_chars(first, last, v).ec == std::errc()) return Json(v);
      // Beyond int64: kept as the nearest double, like every JSON reader without bignums.
    }
    double d = 0;
    if (std::from_chars(first, last, d).ec != std::errc()) {
      d = std::strtod(std::string(first, last).c_str(),
                      nullptr);  // underflow gives 0 or a subnormal
    }
    if (!std::isfinite(d)) fail_at(start, "expected a number within the range of a double");
    return Json(d);
  }

  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
};

void write_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(s, i);
      OCTET_CHECK(n > 0, "json", "cannot write a string that is not valid UTF-8 (byte ", i,
                  " of \"", std::string(s.substr(0, 40)), "...\")");
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    static constexpr std::string_view kSpecial = "\"\\\n\r\t\b\f";
    static constexpr std::string_view kLetter = "\"\\nrtbf";
    if (const size_t k = kSpecial.find(static_cast<char>(c)); k != std::string_view::npos) {
      out += '\\';
      out += kLetter[k];
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

bool is_container(const Json& v) {
  return v.is_array() || v.is_object();
}

void write_value(std::string& out, const Json& v, int indent, int level) {
  const auto newline = [&](int lvl) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.type()) {
    case JsonType::null:
      out += "null";
      break;
    case JsonType::boolean:
      out += v.as_bool() ? "true" : "false";
      break;
    case JsonType::number: {
      char buf[40];
      if (v.is_int()) {
        out.append(buf, std::to_chars(buf, buf + sizeof buf, v.as_int()).ptr);
        break;
      }
      const double d = v.as_number();
      OCTET_CHECK(std::isfinite(d), "json", "cannot write ", d,
                  ": JSON has no NaN or Infinity; store such values as strings or null");
      const std::string_view text(buf, std::to_chars(buf, buf + sizeof buf, d).ptr - buf);
      out += text;
      if (text.find_first_of(".e") == std::string_view::npos) out += ".0";  // stays a double
      break;
    }
    case JsonType::string:
      write_string(out, v.as_string());
      break;
    case JsonType::array: {
      const Json::Array& items = v.as_array();
      const bool flat = std::none_of(items.begin(), items.end(), is_container);
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += (flat && indent >= 0) ? ", " : ",";
        if (!flat) newline(level + 1);
        write_value(out, items[i], indent, level + 1);
      }
      if (!flat && !items.empty()) newline(level);
      out += ']';
      break;
    }
    case JsonType::object: {
      const Json::Object& members = v.as_object();
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        write_string(out, members[i].first);
        out += indent >= 0 ? ": " : ":";
        write_value(out, members[i].second, indent, level + 1);
      }
      if (!members.empty()) newline(level);
      out += '}';
      break;
    }
  }
}

}  // namespace

// ---- Json --------------------------------------------------------------------

bool Json::is_integral() const {
  if (is_int()) return true;
  if (!is_number()) return false;
  const double d = std::get<Number>(value_).value;
  return std::isfinite(d) && d == std::trunc(d) && std::fabs(d) <= 0x1p53;
}

const char* json_type_name(JsonType type) {
  static constexpr const char* kNames[] = {"null",   "boolean", "number",
                                           "string", "array",   "object"};
  return kNames[static_cast<size_t>(type)];
}

void Json::check_uint(uint64_t value) {
  OCTET_CHECK(value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "json",
              "integer ", value, " exceeds the int64 range of JSON integers");
}

Json Json::array(Array items) {
  Json j;
  j.value_ = std::move(items);
  return j;
}

Json Json::object() {
  Json j;
  j.value_ = Object{};
  return j;
}

#define OCTET_JSON_EXPECT(cond, what) \
  OCTET_CHECK(cond, "json", "expected " what ", got a JSON ", json_type_name(type()))

bool Json::as_bool() const {
  OCTET_JSON_EXPECT(is_bool(), "a boolean");
  return std::get<bool>(value_);
}
double Json::as_number() const {
  OCTET_JSON_EXPECT(is_number(), "a number");
  return std::get<Number>(value_).value;
}
int64_t Json::as_int() const {
  OCTET_JSON_EXPECT(is_number(), "an integer");
  const Number& n = std::get<Number>(value_);
  if (n.is_int) return n.exact;
  OCTET_CHECK(is_integral(), "json", "expected an integer, got ", dump());
  return static_cast<int64_t>(n.value);
}
const std::string& Json::as_string() const {
  OCTET_JSON_EXPECT(is_string(), "a string");
  return std::get<std::string>(value_);
}
const Json::Array& Json::as_array() const {
  OCTET_JSON_EXPECT(is_array(), "an array");
  return std::get<Array>(value_);
}
Json::Array& Json::as_array() {
  OCTET_JSON_EXPECT(is_array(), "an array");
  return std::get<Array>(value_);
}
const Json::Object& Json::as_object() const {
  OCTET_JSON_EXPECT(is_object(), "an object");
  return std::get<Object>(value_);
}
Json::Object& Json::as_object() {
  OCTET_JSON_EXPECT(is_object(), "an object");
  return std::get<Object>(value_);
}
#undef OCTET_JSON_EXPECT

size_t Json::size() const {
  return is_array() ? as_array().size() : as_object().size();
}
void Json::push_back(Json value) {
  as_array().push_back(std::move(value));
}

const Json& Json::operator[](size_t i) const {
  const Array& items = as_array();
  OCTET_CHECK(i < items.size(), "json", "index ", i, " is out of range for an array of ",
              items.size());
  return items[i];
}

const Json* Json::find(std::string_view key) const {
  for (const Member& m : as_object()) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}
Json* Json::find(std::string_view key) {
  return const_cast<Json*>(static_cast<const Json*>(this)->find(key));
}

const Json& Json::at(std::string_view key) const {
  const Json* v = find(key);
  OCTET_CHECK(v != nullptr, "json", "missing key '", std::string(key), "'");
  return *v;
}

Json& Json::set(std::string_view key, Json value) {
  if (Json* existing = find(key)) return *existing = std::move(value);
  return as_object().emplace_back(std::string(key), std::move(value)).second;
}

std::string Json::dump(int indent) const {
  std::string out;
  write_value(out, *this, indent, 0);
  return out;
}

bool operator==(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case JsonType::number: {
      const Json::Number& x = std::get<Json::Number>(a.value_);
      const Json::Number& y = std::get<Json::Number>(b.value_);
      return x.is_int && y.is_int ? x.exact == y.exact : x.value == y.value;
    }
    case JsonType::object: {
      if (a.size() != b.size()) return false;
      for (const Json::Member& m : a.as_object()) {
        const Json* other = b.find(m.first);
        if (other == nullptr || !(*other == m.second)) return false;
      }
      return true;
    }
    case JsonType::array:
      return a.as_array() == b.as_array();
    default:
      return a.value_ == b.value_;
  }
}

Json parse_json(std::string_view text, std::string_view source) {
  return Parser(text, source).parse_document();
}

Json read_json_file(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return parse_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                    path);
}

void write_json_file(const std::string& path, const Json& value, int indent) {
  write_file_atomic(path, value.dump(indent) + "\n");
}

}  // namespace octet
