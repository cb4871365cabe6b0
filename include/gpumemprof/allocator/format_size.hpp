// Layer 2: byte counts in words, exactly as PyTorch prints them ("20.00 MiB", "512 bytes").
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// PyTorch's format_size: bytes up to 1 KiB, then KiB/MiB/GiB with two decimals.
[[nodiscard]] inline std::string format_size(std::uint64_t size) {
  char buf[64];
  if (size <= 1024) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(size));
  } else if (size <= 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(size) / 1024.0);
  } else if (size <= 1073741824ull) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(size) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(size) / 1073741824.0);
  }
  return buf;
}

GPUMEMPROF_NAMESPACE_END
