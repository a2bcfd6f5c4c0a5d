// io/json.cpp: parse_json and json_dump over nlohmann-json, with octet's errors.
#include "io/json.h"

#include <cmath>
#include <cstddef>
#include <iterator>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"

namespace octet {
namespace {

constexpr int kMaxDepth = 256;  // deeper documents are rejected, never a stack overflow

// "[json] source:line:column: what" for the byte at `offset` of `text`.
[[noreturn]] void fail_at(std::string_view text, std::string_view source, size_t offset,
                          std::string_view what) {
  offset = std::min(offset, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') ++line, line_start = i + 1;
  }
  OCTET_FAIL("json", std::string(source), ":", line, ":", offset - line_start + 1, ": ",
             std::string(what));
}

// A character iterator that records how far the parser has read, so that the checks made
// in the parser callback (which nlohmann-json gives no position) can name one.
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    ++p_;
    if (p_ > *furthest_) *furthest_ = p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

// The offset of the '"' that opens the string whose closing '"' is at `close`.
size_t string_start(std::string_view text, size_t close) {
  for (size_t i = close; i-- > 0;) {
    if (text[i] != '"') continue;
    size_t backslashes = 0;
    while (backslashes < i && text[i - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return i;
  }
  return 0;
}

// Whether `v` holds a NaN or an infinity anywhere.
bool has_nonfinite(const Json& v) {
  if (v.is_number_float()) return !std::isfinite(v.get<double>());
  if (v.is_structured()) {
    for (const Json& item : v) {
      if (has_nonfinite(item)) return true;
    }
  }
  return false;
}

}  // namespace

Json parse_json(std::string_view text, std::string_view source) {
  const char* furthest = text.data();
  const auto offset_read = [&] { return static_cast<size_t>(furthest - text.data()); };
  // What nlohmann-json accepts, refused here: a duplicate key (it would keep the last) and
  // unbounded nesting.
  std::vector<std::set<std::string>> keys;
  const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxDepth) {
          fail_at(text, source, offset_read() - 1,
                  "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          fail_at(text, source, string_start(text, offset_read() - 1),
                  "duplicate key " + parsed.dump());
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(TrackingIterator(text.data(), &furthest),
                       TrackingIterator(text.data() + text.size(), &furthest), check);
  } catch (const Json::out_of_range& e) {  // 406: a number beyond a double's range
    // The parser has read one byte past the number (unless it ended the text).
    const auto in_number = [&](size_t i) {
      return std::string_view("0123456789+-.eE").find(text[i]) != std::string_view::npos;
    };
    size_t start = offset_read();
    if (start > 0 && !in_number(start - 1)) --start;
    while (start > 0 && in_number(start - 1)) --start;
    fail_at(text, source, start, "expected a number within the range of a double");
  } catch (const Json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 7: <what>";
    // e.byte counts the bytes read, up to the end of the offending token.
    const std::string_view what = e.what();
    const size_t colon = what.find(": ");
    fail_at(text, source, e.byte > 0 ? e.byte - 1 : 0,
            colon == std::string_view::npos ? what : what.substr(colon + 2));
  }
}

Json read_json_file(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return parse_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                    path);
}

std::string json_dump(const Json& value, int indent) {
  OCTET_CHECK(!has_nonfinite(value), "json",
              "cannot write NaN or Infinity (JSON has neither; write null for a missing value)");
  try {
    return value.dump(indent);
  } catch (const Json::type_error& e) {  // 316: a string that is not valid UTF-8
    OCTET_FAIL("json", "cannot write a string that is not valid UTF-8 (", e.what(), ")");
  }
}

Json json_finite_or_null(double x) {
  return std::isfinite(x) ? Json(x) : Json();
}

void write_json_file(const std::string& path, const Json& value, int indent) {
  write_file_atomic(path, json_dump(value, indent) + "\n");
}

}  // namespace octet
