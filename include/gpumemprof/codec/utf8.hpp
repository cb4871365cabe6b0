// Layer 0 (codecs): UTF-8 checks shared by the writers and the readers.
//
// Python decodes pickle strings as UTF-8 and JSON must be UTF-8, so one stray byte in a symbol
// or file name would make a whole snapshot unreadable. Writers therefore replace invalid
// sequences with U+FFFD; readers reject them as corruption.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Length (1..4) of the well-formed UTF-8 sequence that starts at s[i], or 0 when it is not
/// well formed (Unicode table 3-7). allow_surrogates accepts encoded U+D800..U+DFFF, as
/// Python's "surrogatepass" decoder of pickle strings does.
[[nodiscard]] inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i,
                                                      bool allow_surrogates) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto is_cont = [&](std::size_t k) { return (byte(k) & 0xC0U) == 0x80U; };
  const unsigned char b0 = byte(0);
  const std::size_t left = s.size() - i;
  if (b0 < 0x80U) return 1;
  if (b0 >= 0xC2U && b0 <= 0xDFU) return left >= 2 && is_cont(1) ? 2 : 0;
  unsigned lo = 0x80U;
  unsigned hi = 0xBFU;
  if (b0 >= 0xE0U && b0 <= 0xEFU) {
    if (left < 3) return 0;
    if (b0 == 0xE0U) lo = 0xA0U;                       // overlong
    if (b0 == 0xEDU && !allow_surrogates) hi = 0x9FU;  // surrogates
    return byte(1) >= lo && byte(1) <= hi && is_cont(2) ? 3 : 0;
  }
  if (b0 >= 0xF0U && b0 <= 0xF4U) {
    if (left < 4) return 0;
    if (b0 == 0xF0U) lo = 0x90U;  // overlong
    if (b0 == 0xF4U) hi = 0x8FU;  // beyond U+10FFFF
    return byte(1) >= lo && byte(1) <= hi && is_cont(2) && is_cont(3) ? 4 : 0;
  }
  return 0;
}

/// True when s is well-formed UTF-8. ASCII runs are checked eight bytes at a time because
/// nearly every string in a snapshot is ASCII.
[[nodiscard]] inline bool is_valid_utf8(std::string_view s, bool allow_surrogates = false) noexcept {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    if (n - i >= 8) {
      std::uint64_t word = 0;
      std::memcpy(&word, s.data() + i, 8);
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const std::size_t len = utf8_sequence_length(s, i, allow_surrogates);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

/// s with each ill-formed sequence (maximal invalid byte) replaced by U+FFFD.
[[nodiscard]] inline std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t len = utf8_sequence_length(s, i, false);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

/// Calls `write(text)` with `s`, or with a sanitized copy when `s` is not valid UTF-8: the one
/// way every writer turns arbitrary bytes into text.
template <class Write>
void with_valid_utf8(std::string_view s, Write&& write) {
  if (GPUMEMPROF_UNLIKELY(!is_valid_utf8(s))) {
    const std::string fixed = sanitize_utf8(s);
    write(std::string_view(fixed));
  } else {
    write(s);
  }
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
