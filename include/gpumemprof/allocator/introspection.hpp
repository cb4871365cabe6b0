// Layer 2: how higher layers watch and inspect the allocator without the allocator knowing
// them. The history layer registers an event sink (event_sinks.hpp) to record events (its
// `prepare` returns a context handle -- an interned stack -- that the allocator keeps with each
// block and segment); snapshots and reports walk the segments through SegmentView/BlockView.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/allocator/mempool_id.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The kinds of allocator events (PyTorch's TraceEntry actions).
enum class TraceAction : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  snapshot,
  oom,
  // Not a PyTorch trace action: an allocation moved to another memory category
  // (CachingAllocator::set_category). Event sinks see it; the history keeps it beside the trace
  // (Snapshot::category_changes), never in device_traces.
  category_change,
};

[[nodiscard]] constexpr const char* to_string(TraceAction a) noexcept {
  switch (a) {
    case TraceAction::alloc: return "alloc";
    case TraceAction::free_requested: return "free_requested";
    case TraceAction::free_completed: return "free_completed";
    case TraceAction::segment_alloc: return "segment_alloc";
    case TraceAction::segment_free: return "segment_free";
    case TraceAction::segment_map: return "segment_map";
    case TraceAction::segment_unmap: return "segment_unmap";
    case TraceAction::snapshot: return "snapshot";
    case TraceAction::oom: return "oom";
    case TraceAction::category_change: return "category_change";
  }
  return "alloc";
}

/// One allocator event, buffered under the allocator's lock and told to the event sinks after it
/// (event_sinks.hpp), in the allocator's serial order.
struct AllocatorEvent {
  TraceAction action = TraceAction::alloc;
  std::uintptr_t addr = 0;  ///< for oom: the device's free bytes
  std::size_t size = 0;     ///< requested bytes (alloc/free_*), segment bytes (segment_*), rounded request (oom)
  Stream stream;
  std::uint64_t context = 0;  ///< for free_*/segment_free: the handle returned at alloc/segment_alloc
  bool deferred = false;      ///< free_completed only: after other streams' events, not in deallocate()
  std::uint32_t category = 0;  ///< alloc/free_*/category_change: the block's memory category id (0 = none)
  std::uint32_t previous_category = 0;  ///< category_change: the category the block leaves
  // Filled in by the allocator when it buffers the event.
  std::uint64_t stamp = 0;     ///< when it happened (detail::stamp_now(): TSC or steady_clock ns)
  std::uint64_t prepared = 0;  ///< the handle a sink's `prepare` returned for the call that caused it
  std::uint32_t metadata = 0;  ///< the causing thread's user metadata id (set_user_metadata)
  std::size_t block_size = 0;  ///< alloc/free_*/category_change: the block's bytes (allocated_bytes counts these)
};

enum class BlockState : std::uint8_t { active_allocated, active_pending_free, inactive };

[[nodiscard]] constexpr const char* to_string(BlockState s) noexcept {
  switch (s) {
    case BlockState::active_allocated: return "active_allocated";
    case BlockState::active_pending_free: return "active_pending_free";
    case BlockState::inactive: return "inactive";
  }
  return "inactive";
}

/// A block as seen from outside, in address order within its segment.
struct BlockView {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;  ///< 0 unless active
  BlockState state = BlockState::inactive;
  std::uint64_t context = 0;
  std::uint32_t category = 0;  ///< memory category id of the allocation (0 = none or inactive)
};

/// A segment as seen from outside.
struct SegmentView {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  Stream stream;
  bool is_large = true;
  bool is_expandable = false;
  std::uint64_t context = 0;
  MempoolId pool_id;  ///< its pool: (0, 0) default, (N, 0) a graph's, (0, N) a MemPool's
  std::vector<BlockView> blocks;
};

/// Facts handed to OOM observers (PyTorch's OutOfMemoryObserver arguments and more).
struct OomInfo {
  int device = 0;
  std::size_t requested_bytes = 0;   ///< what the caller asked for
  std::size_t allocation_bytes = 0;  ///< the segment size that could not be obtained
  std::size_t device_total = 0;      ///< capacity, or the allowed maximum with a memory fraction
  std::size_t device_free = 0;
  std::size_t allocated_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t largest_free_block = 0;  ///< largest cached free block on the request's stream and pool
};

GPUMEMPROF_NAMESPACE_END
