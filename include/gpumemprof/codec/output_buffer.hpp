// Layer 0 (codecs): the byte buffer the streaming writers fill.
//
// Writers check for room once per token and then append without checks, so the per-byte
// cost is a store; std::ostream sees only large writes.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <ostream>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// A byte buffer with a fixed capacity that grows only when one token does not fit.
class ByteBuffer {
 public:
  explicit ByteBuffer(std::size_t capacity) : data_(new char[capacity]), capacity_(capacity) {}

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] const char* data() const noexcept { return data_.get(); }
  /// True when n more bytes fit without growing.
  [[nodiscard]] bool fits(std::size_t n) const noexcept { return capacity_ - size_ >= n; }

  /// Grows the capacity so that n more bytes fit, keeping the contents.
  void grow_for(std::size_t n) {
    if (fits(n)) return;
    const std::size_t wanted = size_ + n;
    std::unique_ptr<char[]> bigger(new char[wanted]);
    if (size_ != 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = wanted;
  }

  // The appends below assume the caller checked fits() (or called grow_for()).
  void put(char c) noexcept { data_[size_++] = c; }
  void append(const void* p, std::size_t n) noexcept {
    if (n != 0) std::memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  /// Little-endian fixed-width integer.
  template <class T>
  void put_le(T value, std::size_t bytes) noexcept {
    for (std::size_t k = 0; k < bytes; ++k) data_[size_++] = static_cast<char>((value >> (8 * k)) & 0xFFU);
  }

  /// Removes n bytes at pos, shifting the tail down.
  void erase(std::size_t pos, std::size_t n) noexcept {
    std::memmove(data_.get() + pos, data_.get() + pos + n, size_ - pos - n);
    size_ -= n;
  }
  void clear() noexcept { size_ = 0; }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_;
};

/// Writes n bytes to out; a failed stream becomes an IoError (an atomic file writer replaces
/// it with one naming the path and the system's reason).
inline void write_bytes(std::ostream& out, const char* p, std::size_t n) {
  if (n == 0) return;
  out.write(p, static_cast<std::streamsize>(n));
  if (!out) throw IoError("writing to the output stream failed");
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
