// Analysis layer: the facts every report states about a snapshot's segments, computed once --
// per-segment usage (allocated, requested, pending free, free, largest free block) and their
// sums -- with one definition of fragmentation:
//
//   external fragmentation = 1 - largest free block / free bytes
//
// over the inactive (reusable) blocks: 0 when all free memory is one block, near 1 when it is
// scattered into small pieces. It is undefined (n/a) when nothing is free or nothing is live
// (an empty cache is not fragmented). Pending-free blocks are not free yet: they count apart.
// Internal fragmentation is the rounding slack inside live blocks (block bytes - requested).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Bytes and blocks of one segment, or summed over several.
struct SegmentFacts {
  std::uint64_t reserved = 0;   ///< segment bytes
  std::uint64_t allocated = 0;  ///< block bytes of active_allocated blocks
  std::uint64_t requested = 0;  ///< bytes their clients asked for
  std::uint64_t pending = 0;    ///< block bytes of active_pending_free blocks
  std::uint64_t free = 0;       ///< block bytes of inactive blocks
  std::uint64_t largest_free = 0;
  std::uint64_t live_blocks = 0;
  std::uint64_t pending_blocks = 0;
  std::uint64_t free_blocks = 0;

  /// Bytes in blocks not allocated: free and pending free.
  [[nodiscard]] std::uint64_t unallocated() const noexcept { return free + pending; }
  /// Rounding slack inside live blocks.
  [[nodiscard]] std::uint64_t internal_free() const noexcept { return allocated - std::min(allocated, requested); }
  /// 1 - largest free block / free bytes; nullopt when nothing is free or nothing is live.
  [[nodiscard]] std::optional<double> external_fragmentation() const noexcept {
    if (free == 0 || live_blocks == 0) return std::nullopt;
    return 1.0 - static_cast<double>(largest_free) / static_cast<double>(free);
  }

  SegmentFacts& operator+=(const SegmentFacts& o) noexcept {
    reserved += o.reserved;
    allocated += o.allocated;
    requested += o.requested;
    pending += o.pending;
    free += o.free;
    largest_free = std::max(largest_free, o.largest_free);
    live_blocks += o.live_blocks;
    pending_blocks += o.pending_blocks;
    free_blocks += o.free_blocks;
    return *this;
  }
};

/// The usage of a segment of `bytes` holding `blocks`: a snapshot's blocks (SnapshotBlock) or the
/// allocator's live view of them (BlockView), so a report on either states the same facts.
template <class Blocks>
[[nodiscard]] SegmentFacts segment_facts(std::uint64_t bytes, const Blocks& blocks) {
  SegmentFacts u;
  u.reserved = bytes;
  for (const auto& b : blocks) {
    switch (b.state) {
      case BlockState::active_allocated:
        u.allocated += b.size;
        u.requested += b.requested_size;
        ++u.live_blocks;
        break;
      case BlockState::active_pending_free:
        u.pending += b.size;
        ++u.pending_blocks;
        break;
      case BlockState::inactive:
        u.free += b.size;
        u.largest_free = std::max<std::uint64_t>(u.largest_free, b.size);
        ++u.free_blocks;
        break;
    }
  }
  return u;
}

/// The usage of one segment of a snapshot.
[[nodiscard]] SegmentFacts segment_facts(const SnapshotSegment& seg);

/// The usage of one segment of a live allocator (CachingAllocator::visit_segments/segments).
[[nodiscard]] SegmentFacts segment_facts(const SegmentView& seg);

/// The usage summed over the segments of `device` (-1: every device).
[[nodiscard]] SegmentFacts snapshot_facts(const Snapshot& snap, int device = -1);

/// "37.5%", or "n/a" for an undefined ratio.
[[nodiscard]] std::string format_fraction(std::optional<double> f);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/analysis.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/analysis/memory_facts-inl.hpp"
#endif
