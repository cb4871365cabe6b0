// Layer 2: PyTorch's size policy -- how a request is rounded, which pool serves it, how big a
// new segment is, and when a block is split. Pure functions of the request and the config.
//
// Worked defaults: 600 B -> a 1024 B block from a 2 MiB small segment; 1 MiB + 1 B -> a block of
// 1 MiB + 512 B from a 20 MiB large segment; 11 MiB -> a 12 MiB segment used whole.
#pragma once

#include <cstddef>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {
[[nodiscard]] constexpr bool is_power_of_two(std::size_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

// The next of `divisions` equal steps between two powers of two (a power of two stays).
[[nodiscard]] inline std::size_t roundup_power2_next_division(std::size_t size, std::size_t divisions) noexcept {
  if (is_power_of_two(size)) return size;
  const std::size_t floor = std::size_t{1} << (63 - __builtin_clzll(size));
  const std::size_t step = floor >> (63 - __builtin_clzll(divisions));
  if (step == 0) return floor << 1;
  const std::size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}
}  // namespace detail

/// The block size a request of `size` bytes gets (PyTorch's round_size).
[[nodiscard]] inline std::size_t round_size(std::size_t size, const AllocatorConfig& cfg) noexcept {
  if (size < kMinBlockSize) return kMinBlockSize;
  const std::size_t divisions = cfg.divisions_for(size);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return detail::roundup_power2_next_division(size, divisions);
  }
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

/// Whether a rounded size is served by the small pool (<= 1 MiB).
[[nodiscard]] constexpr bool is_small_size(std::size_t rounded) noexcept { return rounded <= kSmallSize; }

/// The size of a new segment for a rounded request (PyTorch's get_allocation_size).
[[nodiscard]] constexpr std::size_t segment_size_for(std::size_t rounded) noexcept {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

/// Whether taking `rounded` bytes from a free block of `block_size` bytes splits off the rest.
[[nodiscard]] inline bool should_split(std::size_t block_size, std::size_t rounded, bool small_pool,
                                       const AllocatorConfig& cfg) noexcept {
  const std::size_t remaining = block_size - rounded;
  if (small_pool || cfg.uses_expandable_segments()) return remaining >= kMinBlockSize;
  return rounded < cfg.max_split_size && remaining > kSmallSize;
}

GPUMEMPROF_NAMESPACE_END
