// Layer 1: free ranges of an address space, for the simulated device: take the lowest range that
// fits, the highest one, or a given range; give ranges back (neighbours merge). No system calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class AddressRanges {
 public:
  /// Gives [addr, addr + size) back; it merges with free neighbours.
  void give(std::uintptr_t addr, std::size_t size) {
    auto next = free_.lower_bound(addr);
    if (next != free_.end() && addr + size == next->first) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == addr) {
        prev->second += size;
        return;
      }
    }
    free_.emplace(addr, size);
  }

  /// First fit at the lowest address; 0 when nothing fits.
  std::uintptr_t take_lowest(std::size_t size) {
    for (const auto& [addr, bytes] : free_) {
      if (bytes >= size) {
        const std::uintptr_t at = addr;  // copy: take() erases the entry
        take(at, size);
        return at;
      }
    }
    return 0;
  }

  /// The highest `size` bytes of the highest free range that holds `size` bytes starting at a
  /// multiple of `align` (a power of two); 0 when none does.
  std::uintptr_t take_highest(std::size_t size, std::size_t align) {
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      const auto [addr, bytes] = *it;
      if (bytes < size) continue;
      const std::uintptr_t at = (addr + bytes - size) & ~(static_cast<std::uintptr_t>(align) - 1);
      if (at < addr) continue;
      take(at, size);
      return at;
    }
    return 0;
  }

  /// Takes exactly [addr, addr + size) when it is free; false otherwise.
  bool take(std::uintptr_t addr, std::size_t size) {
    auto it = free_.upper_bound(addr);
    if (it == free_.begin()) return false;
    --it;
    const auto [start, bytes] = *it;
    if (addr + size > start + bytes) return false;
    free_.erase(it);
    if (addr > start) free_.emplace(start, addr - start);
    if (start + bytes > addr + size) free_.emplace(addr + size, start + bytes - addr - size);
    return true;
  }

  /// Free ranges by address (start -> bytes).
  [[nodiscard]] const std::map<std::uintptr_t, std::size_t>& ranges() const noexcept { return free_; }

 private:
  std::map<std::uintptr_t, std::size_t> free_;
};

GPUMEMPROF_NAMESPACE_END
