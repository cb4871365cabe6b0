// Layer 2: byte counts in words, in PyTorch's units ("20.00 MiB", "512 bytes").
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Bytes in words, the one size formatter of every report: bytes below 1 KiB, then KiB, MiB or
/// GiB with two decimals, each unit from 1.00 of it up ("1.00 MiB", never "1024.00 KiB").
/// PyTorch's format_size, except at exact powers of 1024, which it prints in the smaller unit.
[[nodiscard]] inline std::string format_size(std::uint64_t size) {
  char buf[64];
  if (size < 1024) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(size));
  } else if (size < 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(size) / 1024.0);
  } else if (size < 1073741824ull) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(size) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(size) / 1073741824.0);
  }
  return buf;
}

/// A signed byte count: "-2.00 MiB", "512 bytes".
[[nodiscard]] inline std::string format_signed_size(std::int64_t bytes) {
  const std::string magnitude =
      format_size(bytes < 0 ? 0 - static_cast<std::uint64_t>(bytes) : static_cast<std::uint64_t>(bytes));
  return bytes < 0 ? "-" + magnitude : magnitude;
}

/// A change in bytes, always signed: "+12.00 MiB", "-512 bytes", "0 bytes".
[[nodiscard]] inline std::string format_size_change(std::int64_t change) {
  return change > 0 ? "+" + format_size(static_cast<std::uint64_t>(change)) : format_signed_size(change);
}

/// `noun` after a count, plural unless the count is 1: "1 block", "3 blocks".
[[nodiscard]] inline std::string plural(std::uint64_t count, const std::string& noun) {
  return noun + (count == 1 ? "" : "s");
}

GPUMEMPROF_NAMESPACE_END
