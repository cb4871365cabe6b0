// Layer 0 (codecs): the ValueWriter as compact JSON (RFC 8259), for snapshots, traces and reports.
//
// Tuples become arrays; reuse() is always false (JSON has no references), so shared values
// are written out in full. Floats use the shortest form that reads back exactly and keep a
// ".0" so readers see a float (as Python's json does); NaN and infinities, which JSON cannot
// spell, become null. Integers are written exactly over the full 64-bit range.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/codec/output_buffer.hpp"
#include "gpumemprof/codec/utf8.hpp"
#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct JsonWriterOptions {
  /// Also escape '<', '>' and '&' (as \u003c ...), so the text can sit inside an HTML <script>
  /// element: no "</script>" or "<!--" can appear in it.
  bool script_safe = false;
};

/// Writes one value as compact JSON to a std::ostream. Call finish() after the top-level value.
class JsonWriter final : public ValueWriter {
 public:
  explicit JsonWriter(std::ostream& out, JsonWriterOptions options = {})
      : out_(out), buf_(kBufferSize), script_safe_(options.script_safe) {}
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;
  ~JsonWriter() override = default;

  /// Bytes handed to the stream so far (all of them once finish() returned).
  [[nodiscard]] std::uint64_t bytes_written() const noexcept { return written_; }

 private:
  static constexpr std::size_t kBufferSize = 64 * 1024;

  struct Level {
    bool is_dict = false;
    bool first = true;            // no item written yet
    bool awaiting_value = false;  // dict: key written, value not yet
  };

  void do_begin_dict() override { begin(true, '{'); }
  void do_begin_list() override { begin(false, '['); }
  void do_begin_tuple() override { begin(false, '['); }
  void do_end_dict() override { end(true, '}', "end_dict"); }
  void do_end_list() override { end(false, ']', "end_list"); }
  void do_end_tuple() override { end(false, ']', "end_tuple"); }

  void do_key(std::string_view k) override {
    if (open_.empty() || !open_.back().is_dict) throw std::logic_error("JsonWriter: key() outside a dict");
    Level& l = open_.back();
    if (l.awaiting_value) throw std::logic_error("JsonWriter: key() where the previous key's value is expected");
    if (!l.first) put(',');
    l.first = false;
    write_string(k);
    put(':');
    l.awaiting_value = true;
  }

  void do_int(std::int64_t v) override { scalar(v); }
  void do_uint(std::uint64_t v) override { scalar(v); }
  void do_double(double v) override {
    before_value();
    if (!std::isfinite(v)) {
      raw("null");
      return;
    }
    char tmp[32];
    const auto res = std::to_chars(tmp, tmp + sizeof tmp, v);
    const std::string_view digits(tmp, static_cast<std::size_t>(res.ptr - tmp));
    raw(digits);
    if (digits.find_first_of(".e") == std::string_view::npos) raw(".0");
    after_value();
  }
  void do_bool(bool v) override {
    before_value();
    raw(v ? "true" : "false");
    after_value();
  }
  void do_string(std::string_view v) override {
    before_value();
    write_string(v);
    after_value();
  }
  void do_null() override {
    before_value();
    raw("null");
    after_value();
  }
  bool do_reuse(const void* /*key*/) override { return false; }
  void do_remember(const void* /*key*/) override {}

  void do_finish() override {
    if (!open_.empty() || !root_done_)
      throw std::logic_error("JsonWriter: finish() before the top-level value is complete");
    flush();
    out_.flush();
    if (!out_) throw IoError("writing to the output stream failed");
  }

  // ---- structure ----
  template <class Int>
  void scalar(Int v) {
    before_value();
    char tmp[24];
    const auto res = std::to_chars(tmp, tmp + sizeof tmp, v);
    raw(std::string_view(tmp, static_cast<std::size_t>(res.ptr - tmp)));
    after_value();
  }
  void begin(bool is_dict, char bracket) {
    before_value();
    put(bracket);
    open_.push_back(Level{is_dict, true, false});
  }
  void end(bool is_dict, char bracket, const char* what) {
    if (open_.empty() || open_.back().is_dict != is_dict) {
      throw std::logic_error(std::string("JsonWriter: ") + what + "() does not match the open container");
    }
    if (open_.back().awaiting_value) throw std::logic_error("JsonWriter: end_dict() right after a key");
    open_.pop_back();
    put(bracket);
    after_value();
  }
  void before_value() {
    if (open_.empty()) {
      if (root_done_) throw std::logic_error("JsonWriter: a document holds one top-level value");
      return;
    }
    Level& l = open_.back();
    if (l.is_dict) {
      if (!l.awaiting_value) throw std::logic_error("JsonWriter: a dict value needs key() first");
      l.awaiting_value = false;
      return;
    }
    if (!l.first) put(',');
    l.first = false;
  }
  void after_value() noexcept {
    if (open_.empty()) root_done_ = true;
  }

  // ---- strings ----
  void write_string(std::string_view s) {
    detail::with_valid_utf8(s, [this](std::string_view text) { write_escaped(text); });
  }
  // s is valid UTF-8: only '"', '\\' and control characters need escapes (and, script_safe,
  // the characters that could close or comment out a <script> element).
  void write_escaped(std::string_view s) {
    put('"');
    constexpr std::size_t kChunk = 4096;  // worst case 6 output bytes per input byte
    for (std::size_t at = 0; at < s.size(); at += kChunk) {
      const std::size_t n = std::min(kChunk, s.size() - at);
      room(6 * n);
      for (std::size_t i = at; i < at + n; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (GPUMEMPROF_LIKELY(c >= 0x20 && c != '"' && c != '\\' &&
                              !(script_safe_ && (c == '<' || c == '>' || c == '&')))) {
          buf_.put(static_cast<char>(c));
          continue;
        }
        buf_.put('\\');
        switch (c) {
          case '"': buf_.put('"'); break;
          case '\\': buf_.put('\\'); break;
          case '\b': buf_.put('b'); break;
          case '\f': buf_.put('f'); break;
          case '\n': buf_.put('n'); break;
          case '\r': buf_.put('r'); break;
          case '\t': buf_.put('t'); break;
          default: {
            static constexpr char kHex[] = "0123456789abcdef";
            const char esc[5] = {'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
            buf_.append(esc, 5);
          }
        }
      }
    }
    put('"');
  }

  // ---- bytes ----
  void put(char c) {
    room(1);
    buf_.put(c);
  }
  void raw(std::string_view s) {
    room(s.size());
    buf_.append(s.data(), s.size());
  }
  void room(std::size_t n) {
    if (GPUMEMPROF_LIKELY(buf_.fits(n))) return;
    flush();
    buf_.grow_for(n);
  }
  void flush() {
    detail::write_bytes(out_, buf_.data(), buf_.size());
    written_ += buf_.size();
    buf_.clear();
  }

  std::ostream& out_;
  detail::ByteBuffer buf_;
  std::vector<Level> open_;
  std::uint64_t written_ = 0;
  bool root_done_ = false;
  bool script_safe_ = false;
};

GPUMEMPROF_NAMESPACE_END
