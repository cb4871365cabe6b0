// Sizes as users write them: "80GiB", "512M", "132.75MiB", "1048576" (binary units), for the CLI's
// size options and the environment variables of the simulated device.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {
/// "80GiB", "512M", "132.75MiB", "1048576" -> bytes (binary units; a fraction of at most 6 digits
/// that makes whole bytes). Throws std::invalid_argument.
inline std::size_t parse_bytes(std::string_view text, std::string_view what) {
  std::size_t value = 0;
  const char* const last = text.data() + text.size();
  auto [end, ec] = std::from_chars(text.data(), last, value);
  const bool whole = ec == std::errc() && end != text.data();
  std::uint64_t fraction = 0, scale = 1;  // the digits after a point, and 10^their count
  if (whole && end != last && *end == '.') {
    const char* digits = ++end;
    while (end != last && *end >= '0' && *end <= '9' && end - digits < 7) {
      fraction = fraction * 10 + static_cast<std::uint64_t>(*end - '0');
      scale *= 10;
      ++end;
    }
    if (end == digits || (end != last && *end >= '0' && *end <= '9')) scale = 0;  // none, or more than 6
  }
  std::string_view unit(end, static_cast<std::size_t>(last - end));
  int shift = -1;
  if (whole && scale != 0) {
    if (unit.empty() || unit == "B")
      shift = 0;
    else if (unit == "K" || unit == "KiB")
      shift = 10;
    else if (unit == "M" || unit == "MiB")
      shift = 20;
    else if (unit == "G" || unit == "GiB")
      shift = 30;
    else if (unit == "T" || unit == "TiB")
      shift = 40;
  }
  // fraction < 10^6 < 2^20, so fraction << 40 does not overflow.
  if (shift < 0 || (shift > 0 && value > (~std::size_t{0} >> shift)) ||
      ((fraction << shift) % scale) != 0) {
    throw std::invalid_argument(std::string(what) + ": cannot read " + quote_input(text) +
                                " as a size; write bytes, or a number with K, M, G or T (binary units), in "
                                "whole bytes: 40GiB, 132.75MiB");
  }
  return (value << shift) + static_cast<std::size_t>((fraction << shift) / scale);
}
}  // namespace detail

GPUMEMPROF_NAMESPACE_END
