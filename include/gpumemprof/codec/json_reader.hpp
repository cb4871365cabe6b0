// Layer 0 (codecs): a strict JSON (RFC 8259) parser into DataValue, for reading our JSON snapshots.
//
// Strict: no comments, trailing commas, NaN, single quotes or raw control characters;
// strings must be valid UTF-8 with paired \u surrogates. Numbers without fraction or exponent
// are ints and must fit in 64 bits; the others are floats. Duplicate keys keep the last value
// (as Python does). Arrays become lists. Errors name the line and column.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "gpumemprof/codec/data_value.hpp"
#include "gpumemprof/codec/utf8.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Limits of parse_json.
struct JsonReadOptions {
  /// Deepest nesting of arrays/objects accepted.
  std::uint32_t max_depth = 256;
};

namespace detail {

class JsonParser {
 public:
  JsonParser(std::string_view text, const JsonReadOptions& options) : s_(text), max_depth_(options.max_depth) {}

  DataValue run() {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // tolerate a UTF-8 byte order mark
    skip_ws();
    DataValue v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::size_t line = 1;
    std::size_t col = 1;
    for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw FormatError("json: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(col));
  }
  bool at_end() const noexcept { return pos_ >= s_.size(); }
  char peek() const noexcept { return at_end() ? '\0' : s_[pos_]; }
  void skip_ws() noexcept {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c || at_end()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  DataValue value(std::uint32_t depth) {
    if (at_end()) fail("unexpected end of data, expected a value");
    switch (s_[pos_]) {
      case '{': return object(depth + 1);
      case '[': return array(depth + 1);
      case '"': return DataValue::string(string());
      case 't': return literal("true", DataValue::boolean(true));
      case 'f': return literal("false", DataValue::boolean(false));
      case 'n': return literal("null", DataValue());
      default: return number();
    }
  }
  DataValue literal(std::string_view word, DataValue v) {
    if (s_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
    return v;
  }
  void enter(std::uint32_t depth) {
    if (depth > max_depth_) fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
  }
  DataValue object(std::uint32_t depth) {
    enter(depth);
    ++pos_;  // '{'
    DataValue obj = DataValue::dict();
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return obj;
    }
    while (true) {
      skip_ws();
      if (peek() != '"' || at_end()) fail("expected a string key");
      std::string key = string();
      skip_ws();
      expect(':');
      skip_ws();
      obj.set(std::move(key), value(depth));
      skip_ws();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect('}');
      return obj;
    }
  }
  DataValue array(std::uint32_t depth) {
    enter(depth);
    ++pos_;  // '['
    DataValue::Items items;
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return DataValue::list(std::move(items));
    }
    while (true) {
      skip_ws();
      items.push_back(value(depth));
      skip_ws();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect(']');
      return DataValue::list(std::move(items));
    }
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      // Copy the run of plain characters in one go.
      const std::size_t start = pos_;
      while (!at_end()) {
        const auto c = static_cast<unsigned char>(s_[pos_]);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++pos_;
      }
      out.append(s_.data() + start, pos_ - start);
      if (at_end()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("a raw control character in a string (must be escaped)");
      if (c >= 0x80) {
        const std::size_t len = utf8_sequence_length(s_, pos_, false);
        if (len == 0) fail("invalid UTF-8 in a string");
        out.append(s_.data() + pos_, len);
        pos_ += len;
        continue;
      }
      escape(out);
    }
  }
  void escape(std::string& out) {
    ++pos_;  // backslash
    if (at_end()) fail("unterminated escape");
    const char e = s_[pos_++];
    switch (e) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: --pos_; fail("invalid escape");
    }
    std::uint32_t cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(pos_, 2) != "\\u") fail("unpaired surrogate in \\u escape");
      pos_ += 2;
      const std::uint32_t lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate in \\u escape");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      fail("unpaired surrogate in \\u escape");
    }
    append_utf8(out, cp);
  }
  std::uint32_t hex4() {
    if (s_.size() - pos_ < 4) fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        --pos_;
        fail("invalid hex digit in \\u escape");
      }
    }
    return v;
  }
  static void append_utf8(std::string& out, std::uint32_t cp) {
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

  // number = [-] (0 | [1-9][0-9]*) [. [0-9]+] [(e|E) [+|-] [0-9]+]
  DataValue number() {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0' && !at_end()) {
      ++pos_;
    } else if (digits() == 0) {
      pos_ = start;
      fail("expected a value");
    }
    bool is_float = false;
    if (peek() == '.' && !at_end()) {
      ++pos_;
      is_float = true;
      if (digits() == 0) fail("expected digits after the decimal point");
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      ++pos_;
      is_float = true;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected digits in the exponent");
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (!is_float) {
      std::int64_t v = 0;
      const auto res = std::from_chars(first, last, v);
      if (res.ec != std::errc() || res.ptr != last) {
        pos_ = start;
        fail("an integer that does not fit in 64 bits");
      }
      return DataValue::integer(v);
    }
    double v = 0;
    const auto res = std::from_chars(first, last, v);
    if (res.ec != std::errc() || res.ptr != last) {
      pos_ = start;
      fail("a number out of the range of double");
    }
    return DataValue::floating(v);
  }

  std::string_view s_;
  std::uint32_t max_depth_;
  std::size_t pos_ = 0;
};

}  // namespace detail

/// Parses one JSON document. Throws FormatError("json: <what> at line L, column C").
[[nodiscard]] inline DataValue parse_json(std::string_view text, const JsonReadOptions& options = {}) {
  return detail::JsonParser(text, options).run();
}

GPUMEMPROF_NAMESPACE_END
