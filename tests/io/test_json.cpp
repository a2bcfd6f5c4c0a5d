// tests/io/test_json.cpp: the JSON value, the strict parser, the writer and the field readers.
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
#include "testing.h"

namespace octet {
namespace {

// The message of the octet::Error that `f` throws ("" and a test failure when none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an octet::Error";
  return "";
}

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

TEST(Json, ParsesEveryValueType) {
  const Json v = parse_json(
      R"({"n": null, "t": true, "f": false, "i": -42, "d": 2.5, "s": "hi", "a": [1, [2]],
          "o": {"k": "v"}})");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.size(), 8u);
  EXPECT_TRUE(v.at("n").is_null());
  EXPECT_TRUE(v.at("t").as_bool());
  EXPECT_FALSE(v.at("f").as_bool());
  EXPECT_TRUE(v.at("i").is_int());
  EXPECT_EQ(v.at("i").as_int(), -42);
  EXPECT_FALSE(v.at("d").is_int());
  EXPECT_EQ(v.at("d").as_number(), 2.5);
  EXPECT_EQ(v.at("s").as_string(), "hi");
  EXPECT_EQ(v.at("a")[1][0].as_int(), 2);
  EXPECT_EQ(v.at("o").at("k").as_string(), "v");
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_THROW(v.at("s").as_int(), Error);
  EXPECT_THROW(v.at("a")[2], Error);
}

TEST(Json, IntegersStayExactBeyondDoublePrecision) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable as a double
  for (int64_t x : {big, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                    int64_t{0}, int64_t{-1}}) {
    const std::string text = Json(x).dump();
    EXPECT_EQ(text, std::to_string(x));
    const Json back = parse_json(text);
    EXPECT_TRUE(back.is_int()) << text;
    EXPECT_EQ(back.as_int(), x);
  }
  // Past int64 an integer literal becomes the nearest double, as in other JSON readers.
  const Json huge = parse_json("18446744073709551616");
  EXPECT_FALSE(huge.is_int());
  EXPECT_EQ(huge.as_number(), 0x1p64);
  EXPECT_THROW(Json(std::numeric_limits<uint64_t>::max()), Error);
  EXPECT_EQ(Json(uint64_t{7}).as_int(), 7);
}

TEST(Json, DoublesRoundTripBitForBit) {
  std::vector<double> values = {
      0.1,           1.0 / 3, -0.0, 5e-324, 2.2250738585072014e-308, 1e-310, 1.7976931348623157e308,
      123456789.125, 3.0,     -1e22};
  testing::Rng rng(testing::fresh_seed());
  std::uniform_real_distribution<double> exponent(-300, 300);
  for (int i = 0; i < 200; ++i) values.push_back(std::pow(10.0, exponent(rng)) * (i % 2 ? 1 : -1));
  for (double d : values) {
    const std::string text = Json(d).dump();
    const Json back = parse_json(text);
    EXPECT_FALSE(back.is_int()) << text << " must parse back as a double";
    EXPECT_EQ(bits_of(back.as_number()), bits_of(d)) << text;
  }
  EXPECT_EQ(Json(3.0).dump(), "3.0");
  EXPECT_EQ(Json(-0.0).dump(), "-0.0");
  EXPECT_EQ(Json(0.1).dump(), "0.1");
  EXPECT_EQ(Json(1e300).dump(), "1e+300");
}

TEST(Json, WriterRejectsValuesJsonCannotHold) {
  EXPECT_NE(error_of([] { Json(std::nan("")).dump(); }).find("NaN or Infinity"), std::string::npos);
  EXPECT_THROW(Json(HUGE_VAL).dump(), Error);
  EXPECT_NE(error_of([] { Json(std::string("a\xff")).dump(); }).find("UTF-8"), std::string::npos);
}

TEST(Json, ObjectsKeepInsertionOrderAndSetReplacesInPlace) {
  Json o = Json::object();
  o.set("zeta", 1);
  o.set("alpha", 2);
  o.set("mid", 3);
  o.set("alpha", "two");
  EXPECT_EQ(o.dump(), R"({"zeta":1,"alpha":"two","mid":3})");
  EXPECT_EQ(parse_json(R"({"b":1,"a":2})").dump(), R"({"b":1,"a":2})");
}

TEST(Json, PrettyOutputIsReadableAndParsesBack) {
  Json o = Json::object();
  o.set("name", "octet");
  o.set("dims", Json::array({1, 2, 3}));
  o.set("empty", Json::array());
  Json inner = Json::object();
  inner.set("lr", 0.001);
  o.set("optimizer", std::move(inner));
  o.set("nested", Json::array({Json::array({1}), Json::object()}));
  const std::string pretty = o.dump(2);
  EXPECT_EQ(pretty,
            "{\n"
            "  \"name\": \"octet\",\n"
            "  \"dims\": [1, 2, 3],\n"
            "  \"empty\": [],\n"
            "  \"optimizer\": {\n"
            "    \"lr\": 0.001\n"
            "  },\n"
            "  \"nested\": [\n"
            "    [1],\n"
            "    {}\n"
            "  ]\n"
            "}");
  EXPECT_EQ(parse_json(pretty), o);
  EXPECT_EQ(parse_json(o.dump()), o);
}

TEST(Json, StringEscapesRoundTrip) {
  const Json v = parse_json(R"("q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 \u0001")");
  EXPECT_EQ(v.as_string(), "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xf0\x9f\x98\x80 \x01");
  EXPECT_EQ(v.dump(), R"("q\" b\\ s/ \b\f\n\r\t )"
                      "\xc3\xa9 \xf0\x9f\x98\x80"
                      R"( \u0001")");
  EXPECT_EQ(parse_json(v.dump()), v);
}

TEST(Json, EqualityComparesNumbersByValueAndIgnoresMemberOrder) {
  EXPECT_EQ(Json(1), Json(1.0));
  EXPECT_FALSE(Json(1) == Json(2));
  EXPECT_FALSE(Json(1) == Json("1"));
  EXPECT_EQ(parse_json(R"({"a":1,"b":[true,null]})"), parse_json(R"({"b":[true,null],"a":1})"));
  EXPECT_FALSE(parse_json(R"({"a":1})") == parse_json(R"({"a":1,"b":2})"));
  EXPECT_FALSE(parse_json("[1,2]") == parse_json("[2,1]"));
}

// Each non-JSON text fails with this message (source "<string>", line, column, expectation).
TEST(Json, ParserRejectsWhatJsonDoesNotAllow) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1, 2,]", "<string>:1:7: expected a value after ',' (trailing commas are not JSON)"},
      {R"({"a": 1,})", "<string>:1:9: expected a string key after ','"},
      {R"("\x")", "<string>:1:2: expected an escape"},
      {R"("\u12g4")", "<string>:1:6: expected 4 hex digits"},
      {R"("\ud800")", "<string>:1:2: expected a \\u low surrogate"},
      {R"("\udc00")", "<string>:1:2: unpaired UTF-16 low surrogate"},
      {"\"a\nb\"", "<string>:1:3: expected a character; control characters must be escaped"},
      {"\"\xff\"", "<string>:1:2: expected valid UTF-8"},
      {"\"\xc0\xaf\"", "<string>:1:2: expected valid UTF-8"},  // overlong '/'
      {"01", "<string>:1:1: leading zeros are not JSON"},
      {"1.", "<string>:1:3: expected a digit after '.'"},
      {"1e+", "<string>:1:4: expected a digit in the exponent"},
      {"-", "<string>:1:2: expected a digit"},
      {"1e400", "<string>:1:1: expected a number within the range of a double"},
      {"NaN", "<string>:1:1: expected a value"},
      {"{'a': 1}", "<string>:1:2: expected a string key or '}'"},
      {"[1 2]", "<string>:1:4: expected ',' or ']', found '2'"},
      {"// comment\n1", "<string>:1:1: expected a value"},
      {"tru", "<string>:1:1: expected a value"},
      {"",
       "<string>:1:1: expected a value (an object, array, string, number, true, false or "
       "null), found end of input"},
      {"1 2", "<string>:1:3: expected end of input after the top-level value"},
      {R"({"a": 1, "a": 2})", "<string>:1:10: duplicate key \"a\""},
      {R"({"a" 1})", "<string>:1:6: expected ':' after an object key"},
      {"[\"abc", "<string>:1:6: expected '\"' to end the string, found end of input"},
      {std::string(300, '['), "<string>:1:257: nesting deeper than 256 levels"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = error_of([&] { parse_json(text); });
    EXPECT_EQ(message.rfind("[json] " + expected, 0), 0u)
        << "input: " << text << "\nmessage: " << message << "\nexpected: [json] " << expected;
  }
}

TEST(Json, ErrorNamesSourceLineAndColumn) {
  const std::string text = "{\n  \"a\": 1,\n  \"b\": 2\n  \"c\": 3\n}";
  EXPECT_EQ(error_of([&] { parse_json(text, "config.json"); }),
            "[json] config.json:4:3: expected ',' or '}', found '\"'");
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
  EXPECT_EQ(get_object(c, "sub", "config.json").at("x").as_int(), 1);
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
  Json state = Json::object();
  state.set("step", int64_t{123456789012});
  state.set("loss", 2.718281828459045);
  state.set("history", Json::array({0.5, 0.25}));
  write_json_file(path, state);
  EXPECT_EQ(read_json_file(path), state);
  EXPECT_TRUE(read_json_file(path).at("step").is_int());

  write_file_atomic(path, std::string_view("{\"step\": 1,\n\"loss\": }\n"));
  EXPECT_EQ(error_of([&] { read_json_file(path); }),
            "[json] " + path +
                ":2:9: expected a value (an object, array, string, number, true, "
                "false or null), found '}'");
  const std::string missing = dir + "/missing.json";
  EXPECT_NE(error_of([&] { read_json_file(missing); }).find(missing), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace octet
