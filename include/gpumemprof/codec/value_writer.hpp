// Layer 0 (codecs): the streaming interface that serializers drive (dicts, lists, tuples, scalars).
//
// One serializer walks a Snapshot (or a trace) once and calls this interface; PickleWriter and
// JsonWriter turn the calls into bytes, so the schema is spelled in one place. Values stream
// straight out -- nothing is built in memory -- which keeps a million-entry dump fast.
//
// Call grammar: one top-level value, then finish(). Inside begin_dict()/end_dict() alternate
// key() and one value; inside lists and tuples write values. Misuse throws std::logic_error.
//
// Sharing: reuse(key) writes a reference to a value written earlier and remembered under the
// same key (any stable address, e.g. the vector a Frames pointer holds) and returns true;
// when it returns false, write the value, then call remember(key) right after it. Formats
// without references (JSON) always return false, so the serializer's code is the same.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// A streaming writer of nested dicts/lists/tuples of ints, floats, bools, strings and None.
class ValueWriter {
 public:
  virtual ~ValueWriter() = default;

  void begin_dict() { do_begin_dict(); }
  void end_dict() { do_end_dict(); }
  /// The next dict key (must be followed by exactly one value).
  void key(std::string_view k) { do_key(k); }
  void begin_list() { do_begin_list(); }
  void end_list() { do_end_list(); }
  void begin_tuple() { do_begin_tuple(); }
  void end_tuple() { do_end_tuple(); }

  void value(std::int64_t v) { do_int(v); }
  void value(std::uint64_t v) { do_uint(v); }
  /// Other integer types (int, unsigned, long long, ...) widen to 64 bits.
  template <std::integral T>
  void value(T v) {
    if constexpr (std::same_as<T, bool>) {
      do_bool(v);
    } else if constexpr (std::is_signed_v<T>) {
      do_int(static_cast<std::int64_t>(v));
    } else {
      do_uint(static_cast<std::uint64_t>(v));
    }
  }
  void value(double v) { do_double(v); }
  void value(bool v) { do_bool(v); }
  void value(std::string_view v) { do_string(v); }
  // Without these two, a string literal would pick value(bool).
  void value(const char* v) { do_string(std::string_view(v)); }
  void value(const std::string& v) { do_string(std::string_view(v)); }
  void value(std::nullptr_t) { do_null(); }

  /// key(k) then value(v).
  template <class T>
  void field(std::string_view k, const T& v) {
    do_key(k);
    value(v);
  }

  /// Writes a reference to the value remembered under `key` and returns true; returns false
  /// (writing nothing) when there is none or the format has no references.
  [[nodiscard]] bool reuse(const void* key) { return do_reuse(key); }
  /// Remembers the value just completed under `key` (call right after writing it).
  void remember(const void* key) { do_remember(key); }

  /// Ends the document and hands every buffered byte to the stream. Call once, after the
  /// top-level value; the destructor does not flush.
  void finish() { do_finish(); }

 protected:
  ValueWriter() = default;
  ValueWriter(const ValueWriter&) = default;
  ValueWriter& operator=(const ValueWriter&) = default;

 private:
  virtual void do_begin_dict() = 0;
  virtual void do_end_dict() = 0;
  virtual void do_key(std::string_view k) = 0;
  virtual void do_begin_list() = 0;
  virtual void do_end_list() = 0;
  virtual void do_begin_tuple() = 0;
  virtual void do_end_tuple() = 0;
  virtual void do_int(std::int64_t v) = 0;
  virtual void do_uint(std::uint64_t v) = 0;
  virtual void do_double(double v) = 0;
  virtual void do_bool(bool v) = 0;
  virtual void do_string(std::string_view v) = 0;
  virtual void do_null() = 0;
  virtual bool do_reuse(const void* key) = 0;
  virtual void do_remember(const void* key) = 0;
  virtual void do_finish() = 0;
};

GPUMEMPROF_NAMESPACE_END
