// Layer 0: the exception types. Every message says what went wrong, where, and what to do.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

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
