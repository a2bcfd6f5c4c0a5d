// tests/io/test_json.cpp: what octet asks of JSON (nlohmann-json): exact integers and
// doubles, ordered objects, strict parsing whose errors name source, line and column, a
// writer that refuses NaN, and the typed field readers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/json_fields.h"
#include "testing.h"

namespace octet {
namespace {

using testing::error_of;

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

TEST(Json, IntegersStayExactBeyondDoublePrecision) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable as a double
  for (int64_t x : {big, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                    int64_t{0}, int64_t{-1}}) {
    const std::string text = json_dump(Json(x));
    EXPECT_EQ(text, std::to_string(x));
    const Json back = parse_json(text);
    EXPECT_TRUE(back.is_number_integer()) << text;
    EXPECT_EQ(back.get<int64_t>(), x);
    EXPECT_EQ(get_int(Json{{"n", back}}, "n", "x.json"), x);
  }
  // Past uint64 an integer literal becomes the nearest double, as in other JSON readers.
  const Json huge = parse_json("18446744073709551616");
  EXPECT_TRUE(huge.is_number_float());
  EXPECT_EQ(huge.get<double>(), 0x1p64);
  // Past int64 the field readers refuse what an int64 cannot hold.
  EXPECT_THROW(get_int(parse_json(R"({"n": 9223372036854775808})"), "n", "x.json"), Error);
}

TEST(Json, DoublesRoundTripBitForBit) {
  std::vector<double> values = {
      0.1,           1.0 / 3, -0.0, 5e-324, 2.2250738585072014e-308, 1e-310, 1.7976931348623157e308,
      123456789.125, 3.0,     -1e22};
  testing::Rng rng(testing::fresh_seed());
  std::uniform_real_distribution<double> exponent(-300, 300);
  for (int i = 0; i < 200; ++i) values.push_back(std::pow(10.0, exponent(rng)) * (i % 2 ? 1 : -1));
  for (double d : values) {
    const std::string text = json_dump(Json(d));
    const Json back = parse_json(text);
    EXPECT_TRUE(back.is_number_float()) << text << " must parse back as a double";
    EXPECT_EQ(bits_of(back.get<double>()), bits_of(d)) << text;
  }
  EXPECT_EQ(json_dump(Json(3.0)), "3.0");
  EXPECT_EQ(json_dump(Json(-0.0)), "-0.0");
  EXPECT_EQ(json_dump(Json(0.1)), "0.1");
  EXPECT_EQ(json_dump(Json(1e300)), "1e+300");
}

TEST(Json, WriterRejectsValuesJsonCannotHold) {
  EXPECT_NE(error_of([] { json_dump(Json(std::nan(""))); }).find("NaN or Infinity"),
            std::string::npos);
  EXPECT_THROW(json_dump(Json::array({1.0, HUGE_VAL})), Error);  // nested too
  EXPECT_NE(error_of([] { json_dump(Json(std::string("a\xff"))); }).find("UTF-8"),
            std::string::npos);
  // Where a number may be missing (a diverged loss), records write null instead.
  EXPECT_TRUE(json_finite_or_null(std::nan("")).is_null());
  EXPECT_TRUE(json_finite_or_null(-HUGE_VAL).is_null());
  EXPECT_EQ(json_finite_or_null(2.5), Json(2.5));
}

TEST(Json, ObjectsKeepInsertionOrder) {
  Json o = Json::object();
  o["zeta"] = 1;
  o["alpha"] = 2;
  o["mid"] = 3;
  o["alpha"] = "two";
  EXPECT_EQ(json_dump(o), R"({"zeta":1,"alpha":"two","mid":3})");
  EXPECT_EQ(json_dump(parse_json(R"({"b":1,"a":2})")), R"({"b":1,"a":2})");
  const std::string pretty = json_dump(o, 2);
  EXPECT_EQ(pretty, "{\n  \"zeta\": 1,\n  \"alpha\": \"two\",\n  \"mid\": 3\n}");
  EXPECT_EQ(parse_json(pretty), o);
}

TEST(Json, StringEscapesRoundTrip) {
  const Json v = parse_json(R"("q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 \u0001")");
  EXPECT_EQ(v.get<std::string>(), "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xf0\x9f\x98\x80 \x01");
  EXPECT_EQ(parse_json(json_dump(v)), v);
}

// Each non-JSON text fails with an error that starts "[json] <string>:LINE:COLUMN: " (where
// the parser stopped) and says what is wrong.
TEST(Json, ParserRejectsWhatJsonDoesNotAllow) {
  struct Case {
    std::string text, where, says;
  };
  const std::vector<Case> cases = {
      {"[1, 2,]", "1:7", "unexpected ']'"},  // trailing comma
      {R"({"a": 1,})", "1:9", "expected string literal"},
      {R"("\x")", "1:3", "forbidden character after backslash"},
      {R"("\u12g4")", "1:6", "4 hex digits"},
      {R"("\ud800")", "1:8", "surrogate"},
      {R"("\udc00")", "1:7", "surrogate"},
      {"\"a\nb\"", "1:3", "control character U+000A (LF) must be escaped"},
      {"\"\xff\"", "1:2", "ill-formed UTF-8"},
      {"\"\xc0\xaf\"", "1:2", "ill-formed UTF-8"},  // overlong '/'
      {"01", "1:2", "expected end of input"},       // a leading zero
      {"1.", "1:3", "expected digit after '.'"},
      {"1e+", "1:4", "expected digit after exponent sign"},
      {"-", "1:2", "expected digit after '-'"},
      {"1e400", "1:1", "expected a number within the range of a double"},
      {"[-1e400]", "1:2", "expected a number within the range of a double"},
      {"NaN", "1:1", "invalid literal"},
      {"{'a': 1}", "1:2", "invalid literal"},
      {"[1 2]", "1:4", "unexpected number literal; expected ']'"},
      {"// comment\n1", "1:1", "invalid literal"},  // no comments
      {"tru", "1:4", "invalid literal"},
      {"", "1:1", "unexpected end of input"},
      {"1 2", "1:3", "expected end of input"},
      {R"({"a": 1, "a": 2})", "1:10", "duplicate key \"a\""},
      {R"({"x": {"a\"": 1, "a\"": 2}})", "1:18", R"(duplicate key "a\"")"},
      {R"({"a" 1})", "1:6", "expected ':'"},
      {"[\"abc", "1:6", "missing closing quote"},
      {std::string(300, '['), "1:257", "nesting deeper than 256 levels"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { parse_json(c.text); });
    const std::string prefix = "[json] <string>:" + c.where + ": ";
    EXPECT_EQ(message.rfind(prefix, 0), 0u)
        << "input: " << c.text << "\nmessage: " << message << "\nexpected: " << prefix;
    EXPECT_NE(message.find(c.says), std::string::npos)
        << "input: " << c.text << "\nmessage: " << message << "\nexpected it to say: " << c.says;
  }
}

TEST(Json, ErrorNamesSourceLineAndColumn) {
  const std::string text = "{\n  \"a\": 1,\n  \"b\": 2\n  \"c\": 3\n}";
  EXPECT_EQ(error_of([&] { parse_json(text, "config.json"); }),
            "[json] config.json:4:5: syntax error while parsing object - unexpected string "
            "literal; expected '}'");
}

TEST(Json, TypedFieldsReadValuesAndNameFileAndField) {
  const Json c = parse_json(
      R"({"hidden_size": 64, "lr": 3e-4, "name": "tiny", "tied": true, "width": 4096.0,
          "half": 3.5, "nothing": null, "sub": {"x": 1}, "list": [1]})");
  EXPECT_EQ(get_int(c, "hidden_size", "config.json"), 64);
  EXPECT_EQ(get_int(c, "width", "config.json"), 4096);  // integral doubles are integers
  EXPECT_EQ(get_number(c, "lr", "config.json"), 3e-4);
  EXPECT_EQ(get_number(c, "hidden_size", "config.json"), 64.0);
  EXPECT_EQ(get_string(c, "name", "config.json"), "tiny");
  EXPECT_TRUE(get_bool(c, "tied", "config.json"));
  EXPECT_EQ(get_int(get_object(c, "sub", "config.json"), "x", "sub"), 1);
  EXPECT_EQ(get_array(c, "list", "config.json").size(), 1u);

  EXPECT_EQ(error_of([&] { get_int(c, "layers", "config.json"); }),
            "[json] config.json: missing field 'layers'");
  EXPECT_EQ(error_of([&] { get_int(c, "half", "config.json"); }),
            "[json] config.json: field 'half' must be an integer, got 3.5 (number)");
  EXPECT_EQ(error_of([&] { get_int(c, "name", "[config] config.json"); }),
            "[config] config.json: field 'name' must be an integer, got \"tiny\" (string)");
  EXPECT_EQ(error_of([&] { get_bool(c, "hidden_size", "c.json: model"); }),
            "[json] c.json: model: field 'hidden_size' must be true or false, got 64 (number)");
  EXPECT_THROW(get_string(c, "tied", "config.json"), Error);
  EXPECT_THROW(get_number(c, "name", "config.json"), Error);
  EXPECT_THROW(get_object(c, "list", "config.json"), Error);
  EXPECT_THROW(get_array(c, "sub", "config.json"), Error);
  EXPECT_EQ(error_of([] { get_int(Json::array(), "a", "x.json"); }),
            "[json] x.json: expected a JSON object, got [] (array)");
}

TEST(Json, OptionalFieldsFallBackOnlyWhenAbsentOrNull) {
  const Json c = parse_json(R"({"n": 5, "s": "x", "nothing": null, "b": false, "d": 0.5})");
  EXPECT_EQ(get_int_or(c, "n", 7, "c.json"), 5);
  EXPECT_EQ(get_int_or(c, "absent", 7, "c.json"), 7);
  EXPECT_EQ(get_int_or(c, "nothing", 7, "c.json"), 7);
  EXPECT_EQ(get_number_or(c, "d", 1.5, "c.json"), 0.5);
  EXPECT_EQ(get_number_or(c, "absent", 1.5, "c.json"), 1.5);
  EXPECT_EQ(get_string_or(c, "s", "y", "c.json"), "x");
  EXPECT_EQ(get_string_or(c, "absent", "y", "c.json"), "y");
  EXPECT_FALSE(get_bool_or(c, "b", true, "c.json"));
  EXPECT_TRUE(get_bool_or(c, "absent", true, "c.json"));
  // Present with the wrong type is an error, never silently the default.
  EXPECT_EQ(error_of([&] { get_int_or(c, "s", 7, "c.json"); }),
            "[json] c.json: field 's' must be an integer, got \"x\" (string)");
  EXPECT_THROW(get_bool_or(c, "n", true, "c.json"), Error);
  EXPECT_THROW(get_string_or(c, "n", "", "c.json"), Error);
  EXPECT_THROW(get_number_or(c, "s", 0, "c.json"), Error);
}

TEST(Json, CheckKnownKeysRejectsUnknownFieldsWithASuggestion) {
  const Json ok = parse_json(R"({"hidden_size": 64, "n_layers": 2})");
  EXPECT_NO_THROW(check_known_keys(ok, {"hidden_size", "n_layers", "vocab"}, "config.json"));
  const Json typo = parse_json(R"({"hidden_size": 64, "hiden_size": 64})");
  EXPECT_EQ(error_of([&] {
              check_known_keys(typo, {"hidden_size", "n_layers"}, "[config] config.json");
            }),
            "[config] config.json: unknown field 'hiden_size' (did you mean 'hidden_size'?); "
            "known fields: hidden_size, n_layers");
  const Json far = parse_json(R"({"completely_different": 1})");
  EXPECT_EQ(error_of([&] {
              check_known_keys(far, {"a", "b"}, "c.json");
            }),
            "[json] c.json: unknown field 'completely_different'; known fields: a, b");
}

TEST(Json, FilesRoundTripAndErrorsNameThePath) {
  const std::string dir = ::testing::TempDir() + "octet_json_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/state.json";
  const Json state = {
      {"step", int64_t{123456789012}}, {"loss", 2.718281828459045}, {"history", {0.5, 0.25}}};
  write_json_file(path, state);
  EXPECT_EQ(read_json_file(path), state);
  EXPECT_TRUE(read_json_file(path).at("step").is_number_integer());

  write_file_atomic(path, std::string_view("{\"step\": 1,\n\"loss\": }\n"));
  EXPECT_EQ(error_of([&] { read_json_file(path); }),
            "[json] " + path +
                ":2:9: syntax error while parsing value - unexpected '}'; expected '[', '{', or "
                "a literal");
  const std::string missing = dir + "/missing.json";
  EXPECT_NE(error_of([&] { read_json_file(missing); }).find(missing), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace octet
