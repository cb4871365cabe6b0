// Layer 2: the expandable segments as the planner sees them (expandable_planner.hpp): each
// reservation's blocks in address order, mapped or an unmapped hole, free or not. Value types
// apart from the planner's functions: CachingAllocator keeps one such view as a member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

struct UnmapStep;    // expandable_planner.hpp: a plan's step, which CachingAllocator only declares
struct GrowthPlace;  // expandable_planner.hpp: where a growth goes

/// One block of a reservation, as the planner sees it.
struct PlannedBlock {
  std::uintptr_t addr = 0;
  std::size_t size = 0;  // bytes
  bool mapped = true;    // false: an unmapped hole (always free)
  bool free = true;      // neither allocated nor waiting for another stream's events
};

/// One reservation (an expandable segment): its blocks tile [blocks.front().addr, end).
struct PlannedSegment {
  Stream stream;
  bool small_pool = false;
  std::uintptr_t base = 0;  // the reservation's first address (pages count from it)
  std::uintptr_t end = 0;   // the reservation's end address
  std::vector<PlannedBlock> blocks;
};

struct ExpandableLayout {
  std::size_t page = 0;  // the mapping granularity (bytes, a power of two)
  std::vector<PlannedSegment> segments;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
