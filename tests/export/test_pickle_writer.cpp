// PickleWriter: opcode choice, the 2^53 limit, memo sharing, batching, framing, misuse.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/codec/pickle_reader.hpp"
#include "gpumemprof/codec/pickle_writer.hpp"

using export_test::bin;
using gmp::DataValue;
using gmp::PickleWriter;
using Kind = gmp::DataValue::Kind;

namespace {

template <class Fn>
std::string pickle_of(Fn&& fill, int protocol = 4) {
  std::ostringstream os;
  PickleWriter w(os, protocol);
  fill(w);
  w.finish();
  REQUIRE(w.bytes_written() == os.str().size());
  return os.str();
}

std::string one_int(std::int64_t v) {
  return pickle_of([&](PickleWriter& w) { w.value(v); });
}

std::size_t count_byte(const std::string& s, char c) {
  std::size_t n = 0;
  for (const char x : s) n += x == c ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("pickle: integers take the smallest opcode CPython would use") {
  // Tiny pickles stay unframed (CPython frames only 4 bytes or more).
  CHECK(one_int(0) == bin("\x80\x04K\x00."));
  CHECK(one_int(255) == bin("\x80\x04K\xff."));
  // 4+ bytes of opcodes: one FRAME with its 8-byte length.
  CHECK(one_int(256) == bin("\x80\x04\x95\x04\x00\x00\x00\x00\x00\x00\x00M\x00\x01."));
  CHECK(one_int(-1) == bin("\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00J\xff\xff\xff\xff."));
  CHECK(one_int(std::int64_t{1} << 31) ==
        bin("\x80\x04\x95\x08\x00\x00\x00\x00\x00\x00\x00\x8a\x05\x00\x00\x00\x80\x00."));
  for (const std::int64_t v :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{255}, std::int64_t{256}, std::int64_t{65535},
        std::int64_t{65536}, std::int64_t{-1}, std::int64_t{-128}, std::int64_t{-129}, std::int64_t{2147483647},
        std::int64_t{-2147483648LL}, std::int64_t{2147483648LL}, std::int64_t{-2147483649LL}, std::int64_t{1} << 40,
        -(std::int64_t{1} << 47) - 1, std::int64_t{1} << 53, -(std::int64_t{1} << 53)}) {
    INFO(v);
    const DataValue back = gmp::read_pickle(one_int(v));
    REQUIRE(back.is(Kind::integer));
    CHECK(back.as_int() == v);
  }
}

TEST_CASE("pickle: integers beyond 2^53 are refused with a clear message") {
  constexpr std::uint64_t limit = std::uint64_t{1} << 53;
  CHECK_NOTHROW(one_int(static_cast<std::int64_t>(limit)));
  CHECK_NOTHROW(one_int(-static_cast<std::int64_t>(limit)));
  CHECK_THROWS_AS(one_int(static_cast<std::int64_t>(limit) + 1), std::invalid_argument);
  CHECK_THROWS_AS(one_int(-static_cast<std::int64_t>(limit) - 1), std::invalid_argument);
  CHECK_THROWS_AS(pickle_of([](PickleWriter& w) { w.value(~std::uint64_t{0}); }), std::invalid_argument);
  try {
    (void)pickle_of([&](PickleWriter& w) {
      w.begin_dict();
      w.field("addr", limit + 1);
      w.end_dict();
    });
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("9007199254740993") != std::string::npos);
    CHECK(msg.find("2^53") != std::string::npos);
    CHECK(msg.find("'addr'") != std::string::npos);
  }
}

TEST_CASE("pickle: scalars, strings and tuples read back") {
  const std::string long_text(300, 'x');
  const std::string huge_text(200'000, 'y');  // larger than a frame
  const std::string bytes = pickle_of([&](PickleWriter& w) {
    w.begin_list();
    w.value(1.5);
    w.value(-0.0);
    w.value(true);
    w.value(false);
    w.value(nullptr);
    w.value("");
    w.value("h\xC3\xA9llo");
    w.value(long_text);
    w.value(huge_text);
    w.value(std::string("bad \xFF byte"));
    for (int n = 0; n <= 5; ++n) {
      w.begin_tuple();
      for (int k = 0; k < n; ++k) w.value(k);
      w.end_tuple();
    }
    w.end_list();
  });
  const DataValue v = gmp::read_pickle(bytes);
  REQUIRE(v.is(Kind::list));
  const auto& it = v.items();
  REQUIRE(it.size() == 16);
  CHECK(it[0].as_double() == 1.5);
  CHECK(it[1].is(Kind::floating));
  CHECK(it[2].as_bool());
  CHECK_FALSE(it[3].as_bool());
  CHECK(it[4].is_none());
  CHECK(it[5].as_string().empty());
  CHECK(it[6].as_string() == "h\xC3\xA9llo");
  CHECK(it[7].as_string() == long_text);
  CHECK(it[8].as_string() == huge_text);
  CHECK(it[9].as_string() == "bad \xEF\xBF\xBD byte");  // invalid UTF-8 replaced by U+FFFD
  for (std::size_t n = 0; n <= 5; ++n) {
    INFO("tuple of " << n);
    REQUIRE(it[10 + n].is(Kind::tuple));
    REQUIRE(it[10 + n].size() == n);
    for (std::size_t k = 0; k < n; ++k) CHECK(it[10 + n].items()[k].as_int() == static_cast<std::int64_t>(k));
  }
}

TEST_CASE("pickle: small tuples use TUPLE1..3 without a MARK, like CPython") {
  const std::string pair = pickle_of([](PickleWriter& w) {
    w.begin_tuple();
    w.value(0);
    w.value(0);
    w.end_tuple();
  });
  CHECK(pair == bin("\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00K\x00K\x00\x86."));
}

TEST_CASE("pickle: lists and dicts are written in batches of 1000") {
  const std::string bytes = pickle_of([](PickleWriter& w) {
    w.begin_list();
    for (int i = 0; i < 2500; ++i) w.value(true);
    w.end_list();
  });
  // Only NEWTRUE (0x88) between the marks: 3 MARKs and 3 APPENDS for 1000 + 1000 + 500.
  CHECK(count_byte(bytes, '(') == 3);
  CHECK(count_byte(bytes, 'e') == 3);
  const DataValue v = gmp::read_pickle(bytes);
  CHECK(v.size() == 2500);

  const DataValue d = gmp::read_pickle(pickle_of([](PickleWriter& w) {
    w.begin_dict();
    for (int i = 0; i < 2100; ++i) w.field("k" + std::to_string(i), i);
    w.end_dict();
  }));
  REQUIRE(d.size() == 2100);
  CHECK(d.find("k0")->as_int() == 0);
  CHECK(d.find("k2099")->as_int() == 2099);
  CHECK(d.find("k2100") == nullptr);
}

TEST_CASE("pickle: reuse/remember writes a shared value once and shrinks the output") {
  static const std::vector<std::string> stack = {"frame_a", "frame_b", "frame_c", "frame_d"};
  const auto write = [](PickleWriter& w, bool share) {
    w.begin_list();
    for (int i = 0; i < 100; ++i) {
      w.begin_dict();
      w.field("index", i);
      w.key("frames");
      if (!share || !w.reuse(&stack)) {
        w.begin_list();
        for (const auto& f : stack) w.value(f);
        w.end_list();
        if (share) w.remember(&stack);
      }
      w.end_dict();
    }
    w.end_list();
  };
  const std::string shared = pickle_of([&](PickleWriter& w) { write(w, true); });
  const std::string plain = pickle_of([&](PickleWriter& w) { write(w, false); });
  CHECK(shared.size() * 3 < plain.size());

  const DataValue a = gmp::read_pickle(shared);
  const DataValue b = gmp::read_pickle(plain);
  REQUIRE(a.size() == 100);
  REQUIRE(b.size() == 100);
  for (std::size_t i = 0; i < 100; ++i) {
    const DataValue* fa = a.items()[i].find("frames");
    const DataValue* fb = b.items()[i].find("frames");
    REQUIRE(fa->size() == 4);
    REQUIRE(fb->size() == 4);
    for (std::size_t k = 0; k < 4; ++k) CHECK(fa->items()[k].as_string() == fb->items()[k].as_string());
    // The memo makes them one object, as Python would see it.
    CHECK(fa->identity() == a.items()[0].find("frames")->identity());
  }
  CHECK(b.items()[0].find("frames")->identity() != b.items()[1].find("frames")->identity());
}

TEST_CASE("pickle: remembered values past memo slot 255 use LONG_BINGET") {
  std::vector<int> keys(300);
  const std::string bytes = pickle_of([&](PickleWriter& w) {
    w.begin_list();
    for (int& k : keys) {
      w.value("value " + std::to_string(&k - keys.data()));
      w.remember(&k);
    }
    for (int& k : keys) CHECK(w.reuse(&k));
    w.end_list();
  });
  const DataValue v = gmp::read_pickle(bytes);
  REQUIRE(v.size() == 600);
  for (std::size_t i = 0; i < 300; ++i) CHECK(v.items()[300 + i].as_string() == "value " + std::to_string(i));
  CHECK(bytes.find('j') != std::string::npos);  // LONG_BINGET
}

TEST_CASE("pickle: protocol 2 uses BINPUT and BINUNICODE and no frames") {
  int key = 0;
  const std::string bytes = pickle_of(
      [&](PickleWriter& w) {
        w.begin_list();
        w.value("x");
        w.remember(&key);
        CHECK(w.reuse(&key));
        w.end_list();
      },
      2);
  CHECK(bytes.substr(0, 2) == bin("\x80\x02"));
  CHECK(bytes.find('\x95') == std::string::npos);  // FRAME
  CHECK(bytes.find('\x8c') == std::string::npos);  // SHORT_BINUNICODE
  CHECK(bytes.find('q') != std::string::npos);     // BINPUT
  const DataValue v = gmp::read_pickle(bytes);
  REQUIRE(v.size() == 2);
  CHECK(v.items()[1].as_string() == "x");
  std::ostringstream sink;
  CHECK_THROWS_AS(PickleWriter(sink, 3), std::invalid_argument);
}

TEST_CASE("pickle: misuse of the writer is a logic_error") {
  std::ostringstream os;
  SECTION("value in a dict without a key") {
    PickleWriter w(os);
    w.begin_dict();
    CHECK_THROWS_AS(w.value(1), std::logic_error);
  }
  SECTION("key outside a dict") {
    PickleWriter w(os);
    w.begin_list();
    CHECK_THROWS_AS(w.key("k"), std::logic_error);
  }
  SECTION("mismatched end") {
    PickleWriter w(os);
    w.begin_list();
    CHECK_THROWS_AS(w.end_dict(), std::logic_error);
  }
  SECTION("finish before the value is complete") {
    PickleWriter w(os);
    w.begin_list();
    CHECK_THROWS_AS(w.finish(), std::logic_error);
  }
  SECTION("two top-level values") {
    PickleWriter w(os);
    w.value(1);
    CHECK_THROWS_AS(w.value(2), std::logic_error);
  }
  SECTION("remember without a value") {
    PickleWriter w(os);
    int k = 0;
    w.begin_list();
    CHECK_THROWS_AS(w.remember(&k), std::logic_error);
  }
}

TEST_CASE("pickle: python3 reads our pickle with only the viewer's opcodes") {
  if (!export_test::have_python()) {
    WARN("python3 not found: skipped");
    return;
  }
  export_test::TempDir dir;
  const std::string path = dir.file("values.pickle");
  export_test::write_bytes(path, pickle_of([](PickleWriter& w) {
                             w.begin_dict();
                             w.field("int", -(std::int64_t{1} << 40));
                             w.field("float", 0.25);
                             w.field("text", "h\xC3\xA9llo");
                             w.key("tuple");
                             w.begin_tuple();
                             w.value(0);
                             w.value(0);
                             w.end_tuple();
                             w.key("many");
                             w.begin_list();
                             for (int i = 0; i < 1500; ++i) w.value(i);
                             w.end_list();
                             w.end_dict();
                           }));
  const std::string script = R"(
import pickle, pickletools, sys
data = open(sys.argv[1], 'rb').read()
viewer = {"PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE",
          "TUPLE1", "TUPLE2", "TUPLE3", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "BININT", "BININT1", "BININT2",
          "LONG1", "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE", "SHORT_BINUNICODE", "BINUNICODE", "BINPUT",
          "LONG_BINPUT", "BINGET", "LONG_BINGET", "MEMOIZE"}
ops = {op.name for op, _, _ in pickletools.genops(data)}
assert ops <= viewer, ops - viewer
v = pickle.loads(data)
assert v == {'int': -(1 << 40), 'float': 0.25, 'text': 'h\u00e9llo', 'tuple': (0, 0), 'many': list(range(1500))}, v
print('ok')
)";
  std::string out;
  CHECK(export_test::run_python(script, {path}, &out) == 0);
  INFO(out);
  CHECK(out.find("ok") != std::string::npos);
}
