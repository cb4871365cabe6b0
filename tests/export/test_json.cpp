// JsonWriter (escaping, numbers, structure) and the strict parse_json.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/error.hpp"

using gmp::DataValue;
using gmp::FormatError;
using gmp::JsonWriter;
using gmp::parse_json;
using Kind = gmp::DataValue::Kind;

namespace {

template <class Fn>
std::string json_of(Fn&& fill) {
  std::ostringstream os;
  JsonWriter w(os);
  fill(w);
  w.finish();
  REQUIRE(w.bytes_written() == os.str().size());
  return os.str();
}

std::string json_error_of(const std::string& text) {
  try {
    (void)parse_json(text);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("json: compact output with escapes") {
  const std::string out = json_of([](JsonWriter& w) {
    w.begin_dict();
    w.field("s", "q\"b\\n\nt\tc\x01\x1f\x7f");
    w.field("u", "\xC3\xA9\xE2\x98\x83\xF0\x9F\x98\x80");
    w.field("bad",
            "a\xFF"
            "b");
    w.key("list");
    w.begin_list();
    w.value(1);
    w.value(nullptr);
    w.value(true);
    w.begin_tuple();
    w.value(0);
    w.value(0);
    w.end_tuple();
    w.begin_dict();
    w.end_dict();
    w.end_list();
    w.end_dict();
  });
  CHECK(out ==
        "{\"s\":\"q\\\"b\\\\n\\nt\\tc\\u0001\\u001f\x7f\",\"u\":\"\xC3\xA9\xE2\x98\x83\xF0\x9F\x98\x80\","
        "\"bad\":\"a\xEF\xBF\xBD"
        "b\",\"list\":[1,null,true,[0,0],{}]}");
}

TEST_CASE("json: numbers read back exactly; floats stay floats") {
  const std::string out = json_of([](JsonWriter& w) {
    w.begin_list();
    w.value(0.0);
    w.value(-0.0);
    w.value(0.1);
    w.value(1e300);
    w.value(123456789.0);
    w.value(std::numeric_limits<double>::quiet_NaN());
    w.value(std::numeric_limits<double>::infinity());
    w.value(std::numeric_limits<std::int64_t>::min());
    w.value(std::numeric_limits<std::uint64_t>::max());
    w.end_list();
  });
  CHECK(out == "[0.0,-0.0,0.1,1e+300,123456789.0,null,null,-9223372036854775808,18446744073709551615]");
  CHECK_THROWS_AS(parse_json(out), FormatError);  // 2^64-1 does not fit in an int64
  const DataValue v = parse_json(out.substr(0, out.rfind(',')) + "]");
  REQUIRE(v.size() == 8);
  CHECK(v.items()[0].is(Kind::floating));
  CHECK(std::signbit(v.items()[1].as_double()));
  CHECK(v.items()[2].as_double() == 0.1);
  CHECK(v.items()[3].as_double() == 1e300);
  CHECK(v.items()[5].is_none());
  CHECK(v.items()[7].as_int() == std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("json: reuse is never taken and remember is harmless") {
  int key = 0;
  const std::string out = json_of([&](JsonWriter& w) {
    w.begin_list();
    w.value("x");
    w.remember(&key);
    CHECK_FALSE(w.reuse(&key));
    w.value("x");
    w.end_list();
  });
  CHECK(out == "[\"x\",\"x\"]");
}

TEST_CASE("json: misuse of the writer is a logic_error") {
  std::ostringstream os;
  JsonWriter w(os);
  w.begin_dict();
  CHECK_THROWS_AS(w.value(1), std::logic_error);
  w.key("a");
  CHECK_THROWS_AS(w.key("b"), std::logic_error);
  CHECK_THROWS_AS(w.end_dict(), std::logic_error);
  w.value(1);
  CHECK_THROWS_AS(w.end_list(), std::logic_error);
  CHECK_THROWS_AS(w.finish(), std::logic_error);
}

TEST_CASE("parse_json: valid documents") {
  const DataValue v = parse_json(
      " \n{\"a\": [1, -2, 3.5, -0.25e-2, 1E3, true, false, null], \"s\": \"\\u00e9\\ud83d\\ude00\\n\\/\", "
      "\"a\": {\"x\": {}}, \"e\": []}\n");
  REQUIRE(v.is(Kind::dict));
  REQUIRE(v.size() == 3);                          // "a" repeated: one item,
  CHECK(v.find("a")->is(Kind::dict));              // with the last value,
  CHECK(v.entries()[0].first.as_string() == "a");  // at the first position
  CHECK(v.find("s")->as_string() == "\xC3\xA9\xF0\x9F\x98\x80\n/");
  const DataValue l = parse_json("[1, -2, 3.5, -0.25e-2, 1E3, true, false, null]");
  CHECK(l.items()[1].as_int() == -2);
  CHECK(l.items()[3].as_double() == -0.0025);
  CHECK(l.items()[4].is(Kind::floating));
  CHECK(parse_json("\xEF\xBB\xBF"
                   "7")
            .as_int() == 7);  // a byte order mark is skipped
}

TEST_CASE("parse_json: strict about everything else, with line and column") {
  CHECK(json_error_of("[1,]").find("expected a value") != std::string::npos);
  CHECK(json_error_of("{\"a\":1,}").find("expected a string key") != std::string::npos);
  CHECK(json_error_of("[01]").find("expected ']'") != std::string::npos);
  CHECK(json_error_of("[1.]").find("decimal point") != std::string::npos);
  CHECK(json_error_of("['a']").find("expected a value") != std::string::npos);
  CHECK(json_error_of("[NaN]").find("expected a value") != std::string::npos);
  CHECK(json_error_of("// c\n[]").find("expected a value") != std::string::npos);
  CHECK(json_error_of("[\"a\nb\"]").find("control character") != std::string::npos);
  CHECK(json_error_of("[\"\\ud800\"]").find("surrogate") != std::string::npos);
  CHECK(json_error_of("[\"\\x\"]").find("invalid escape") != std::string::npos);
  CHECK(json_error_of("[\"\xFF\"]").find("UTF-8") != std::string::npos);
  CHECK(json_error_of("[\"abc").find("unterminated") != std::string::npos);
  CHECK(json_error_of("[] []").find("after the JSON value") != std::string::npos);
  CHECK(json_error_of("[tru]").find("invalid literal") != std::string::npos);
  CHECK(json_error_of("[1e400]").find("range") != std::string::npos);
  CHECK(json_error_of("").find("unexpected end") != std::string::npos);
  CHECK(json_error_of("{\n  \"a\": ?\n}").find("line 2, column 8") != std::string::npos);
  std::string deep(300, '[');
  deep += std::string(300, ']');
  CHECK(json_error_of(deep).find("nesting deeper than 256") != std::string::npos);
}

TEST_CASE("json: writer output parses back to the same values") {
  const std::string out = json_of([](JsonWriter& w) {
    w.begin_dict();
    for (int i = 0; i < 50; ++i) w.field("k" + std::to_string(i), i * 1000003LL);
    w.field("text", std::string("tab\there \"quoted\" \\ \x02 \xE2\x82\xAC"));
    w.end_dict();
  });
  const DataValue v = parse_json(out);
  REQUIRE(v.size() == 51);
  CHECK(v.find("k49")->as_int() == 49 * 1000003LL);
  CHECK(v.find("text")->as_string() == "tab\there \"quoted\" \\ \x02 \xE2\x82\xAC");
  if (export_test::have_python()) {
    export_test::TempDir dir;
    export_test::write_bytes(dir.file("out.json"), out);
    std::string msg;
    CHECK(export_test::run_python("import json, sys\nd = json.load(open(sys.argv[1]))\nassert d['k7'] == 7000021, d\n"
                                  "assert d['text'] == 'tab\\there \"quoted\" \\\\ \\x02 \\u20ac', repr(d['text'])\n",
                                  {dir.file("out.json")}, &msg) == 0);
    INFO(msg);
  }
}
