// Layer 1: where the CUDA driver places cudaMalloc allocations, as a model for the simulated
// device. The caching allocator breaks ties between equal-size free blocks by address, so a
// replay gives PyTorch's figures only when its segments lie in the order the driver gave them.
//
// The rules, read off what an H200 with driver 580 did (docs/sim-placement.md has the evidence):
// - Address space is taken in chunks: a multiple of 32 MiB (the allocation rounded up), placed
//   top-down at the highest free 32 MiB-aligned range below what is taken.
// - An allocation (in 2 MiB pages) goes to the free space inside the chunks at the lowest
//   address where it fits, the chunks' tails included: a 20 MiB allocation leaves 12 MiB of its
//   chunk that a later 2 MiB or 12 MiB allocation fills, small and large alike. Only when no
//   chunk has room does a new chunk come, the allocation at its start (its lowest address).
// - The CUDA context holds the top 512 MiB, with two holes that PyTorch's first allocations
//   fill (2 MiB at 96 MiB below the top, the top 24 MiB).
// - A chunk whose allocations are all freed goes back to the address space (not confirmed:
//   the driver's placement after frees follows rules this model does not have).
// Pure bookkeeping, no system calls; the simulated device calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/address_ranges.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The driver's layout rules (defaults: what an H200 with driver 580 did in a PyTorch process).
struct DriverLayout {
  std::size_t chunk = std::size_t{32} << 20;     ///< address space is taken in multiples of this, aligned
  std::size_t context = std::size_t{512} << 20;  ///< the top of the address space the CUDA context holds
  /// Free holes in the context: (offset of the hole's start below the top, bytes).
  std::vector<std::pair<std::size_t, std::size_t>> context_holes{{std::size_t{98} << 20, std::size_t{2} << 20},
                                                                 {std::size_t{24} << 20, std::size_t{24} << 20}};
};

class DriverPlacement {
 public:
  /// Places allocations in `va` (which the caller owns and keeps alive) below `top`, a multiple
  /// of layout.chunk; `page` is the device's allocation granularity.
  DriverPlacement(AddressRanges& va, std::uintptr_t top, std::size_t page, DriverLayout layout)
      : va_(&va), page_(page), layout_(std::move(layout)) {
    if (layout_.context == 0 || !va_->take(top - layout_.context, layout_.context)) return;
    context_ = top - layout_.context;
    Chunk& context = chunks_[context_];
    context.bytes = layout_.context;
    for (const auto& [below_top, bytes] : layout_.context_holes) {
      if (below_top > layout_.context || bytes > below_top || below_top % page_ != 0 || bytes % page_ != 0) continue;
      context.holes.give(top - below_top, bytes);
    }
  }

  /// Address for `bytes` (a multiple of the page), or 0 when the address space has no room.
  std::uintptr_t allocate(std::size_t bytes) {
    // Chunks by address, each chunk's holes by address: the lowest hole that fits.
    for (auto& [base, chunk] : chunks_) {
      if (const std::uintptr_t at = chunk.holes.take_lowest(bytes); at != 0) return at;
    }
    std::size_t c = (bytes + layout_.chunk - 1) / layout_.chunk * layout_.chunk;
    std::uintptr_t base = va_->take_highest(c, layout_.chunk);
    if (base == 0) {  // the address space is tight (a small device): a chunk of just the allocation
      c = bytes;
      base = va_->take_highest(c, page_);
    }
    if (base == 0) return 0;
    Chunk& chunk = chunks_[base];
    chunk.bytes = c;
    if (c > bytes) chunk.holes.give(base + bytes, c - bytes);
    return base;
  }

  /// Whether `addr` lies in one of this model's chunks (the context included).
  [[nodiscard]] bool owns(std::uintptr_t addr) const {
    auto it = chunks_.upper_bound(addr);
    if (it == chunks_.begin()) return false;
    --it;
    return addr < it->first + it->second.bytes;
  }

  /// Gives back an allocation; an emptied chunk (not the context's) returns to the address space.
  void free(std::uintptr_t addr, std::size_t bytes) {
    auto it = std::prev(chunks_.upper_bound(addr));
    auto& [base, chunk] = *it;
    chunk.holes.give(addr, bytes);
    const auto& holes = chunk.holes.ranges();
    if (base != context_ && holes.size() == 1 && holes.begin()->first == base && holes.begin()->second == chunk.bytes) {
      va_->give(base, chunk.bytes);
      chunks_.erase(it);
    }
  }

 private:
  /// Address space taken from the device's range; its free holes never reach into another chunk.
  struct Chunk {
    std::size_t bytes = 0;
    AddressRanges holes;
  };

  AddressRanges* va_;
  std::size_t page_;
  DriverLayout layout_;
  std::uintptr_t context_ = 0;
  std::map<std::uintptr_t, Chunk> chunks_;  // by base address
};

GPUMEMPROF_NAMESPACE_END
