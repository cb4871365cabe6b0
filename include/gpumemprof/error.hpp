// Layer 0: the exception types. Every message says what went wrong, where, and what to do.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// `input` as an error message may quote it: in single quotes, bytes outside printable ASCII
/// as \xNN, cut to about `max_chars` characters with "..." (a binary file fed to a reader must
/// not put raw bytes or a megabyte line on the terminal).
[[nodiscard]] inline std::string quote_input(std::string_view input, std::size_t max_chars = 60) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "'";
  std::size_t shown = 0;
  for (const char ch : input) {
    const auto c = static_cast<unsigned char>(ch);
    const std::size_t width = (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') ? 1 : (c == '\\' || c == '\'') ? 2 : 4;
    if (shown + width > max_chars) {
      out += "...";
      break;
    }
    if (width == 1) {
      out += ch;
    } else if (width == 2) {
      out += '\\';
      out += ch;
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
    shown += width;
  }
  out += '\'';
  return out;
}

/// The message for a bad environment variable: its name, its value (quoted), why, what to do.
/// Thrown as the error type of what the variable sets (ConfigError, DeviceError) by the first
/// call that reads it -- never from a static initializer.
[[nodiscard]] inline std::string environment_error(std::string_view name, std::string_view value,
                                                   std::string_view why) {
  std::string msg = "environment variable ";
  msg.append(name).append("=").append(quote_input(value)).append(": ").append(why);
  msg.append(" (fix or unset ").append(name).append(")");
  return msg;
}

/// An unknown or unavailable device ("cuda:7" on a one-GPU machine, "gpu0", ...).
class DeviceError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A bad allocator configuration string or value; the message names the key.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// deallocate()/record_stream() of a pointer this allocator does not own (foreign, interior or
/// already freed). The allocator is left unchanged.
class InvalidPointerError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The device (or the configured memory fraction) cannot satisfy a request even after the
/// allocator released its cache. Derives from std::bad_alloc so generic handlers catch it.
class OutOfMemoryError : public std::bad_alloc {
 public:
  OutOfMemoryError(std::string message, std::size_t requested_bytes)
      : message_(std::move(message)), requested_bytes_(requested_bytes) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  /// The size the caller asked for, in bytes (unrounded).
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::string message_;
  std::size_t requested_bytes_;
};

/// A failure reported by the device runtime (other than out-of-memory).
class DeviceRuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Malformed input data: a trace line, a snapshot file. The message names file and position.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A file could not be read or written; the message names the path and the reason.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

GPUMEMPROF_NAMESPACE_END
