// Layer 2: the bodies of ExpandableState (expandable_state.hpp): `inline` in header-only mode,
// defined once in the compiled library (lib/expandable_state.cpp) otherwise. Not a header to
// include on its own.
#pragma once

#include <algorithm>
#include <cstddef>

#include "gpumemprof/allocator/expandable_state.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

GPUMEMPROF_FUNC ExpandableState::ExpandableState(std::size_t page, bool compacting) noexcept
    : page_(page),
      // PyTorch's pages are its segment sizes in whole pages; the compacting policy's, one page.
      large_page_(compacting ? page : (kLargeBuffer + page - 1) / page * page),
      small_page_(compacting ? page : (kSmallBuffer + page - 1) / page * page) {}

GPUMEMPROF_FUNC void ExpandableState::note_request(const Stat& live, std::size_t size) noexcept {
  const std::size_t high =
      std::max({live_high_, static_cast<std::size_t>(live.peak), static_cast<std::size_t>(live.current) + size});
  const auto total = static_cast<std::size_t>(live.allocated);
  if (high > live_high_ || total < allocated_at_high_) allocated_at_high_ = total;  // a new high (or a reset)
  live_high_ = high;
}

GPUMEMPROF_FUNC bool ExpandableState::settled(const Stat& live) const noexcept {
  const auto total = static_cast<std::size_t>(live.allocated);
  return total - allocated_at_high_ > static_cast<std::size_t>(kSettleAfter * static_cast<double>(live_high_));
}

GPUMEMPROF_FUNC ExpandableLayout& ExpandableState::refresh(Segment* first) {
  layout_.page = page_;
  segments_.clear();
  std::size_t n = 0;
  for (Segment* s = first; s != nullptr; s = s->list_next) {
    if (!s->expandable) continue;
    if (n == layout_.segments.size()) layout_.segments.emplace_back();
    plan_segment(*s, layout_.segments[n++]);
    segments_.push_back(s);
  }
  layout_.segments.resize(n);
  return layout_;
}

GPUMEMPROF_FUNC void ExpandableState::plan_segment(const Segment& s, PlannedSegment& into) {
  into.stream = s.stream;
  into.small_pool = s.small_pool;
  into.base = s.addr;
  into.end = s.addr + s.reservation.size;
  into.blocks.clear();
  for (const Block* b = s.head; b != nullptr; b = b->next()) {
    into.blocks.push_back({b->addr, b->size, b->mapped, b->is_free()});
  }
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
