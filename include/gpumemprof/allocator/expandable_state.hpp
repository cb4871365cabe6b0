// Layer 2: what the caching allocator keeps for expandable segments between growths -- the pages
// each pool maps, the high-water mark of live bytes that bounds the compacting policy's fresh
// pages, and the planner's view of every expandable segment (expandable_layout.hpp), reused so
// that building it allocates nothing once warm. The policies are expandable_planner.hpp's; the
// allocator's expandable executor (expandable_executor.hpp) owns this part, carries the plans
// out and asks it for pages, budgets and the view.
//
// Invariants. The pages are fixed at construction: a power of two `page` (the device's mapping
// granularity, a multiple of 512), and per pool either PyTorch's segment size rounded up to
// whole pages (expandable_segments) or the granularity itself (compacting). live_high() never
// falls: it is the most bytes ever live, as of the latest request; allocated_at_high() is
// allocated_bytes.all.allocated when it last rose (or when that total went back below it: a
// reset). The view holds, after refresh(), exactly the expandable segments of the list, in
// creation order, segments()[i] being the segment of view().segments[i]. The owner (the
// executor) holds the allocator's device mutex for every call but the constructor.
#pragma once

#include <cstddef>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/expandable_layout.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class ExpandableState {
 public:
  // Growth of at most one page maps fresh pages while reserved stays within this fraction above
  // the most bytes ever live (live_high()); beyond it, a free page elsewhere moves (unmapped
  // there, mapped here): see expandable_planner.hpp. The goal is <= 1.03x peak requested and <=
  // PyTorch's expandable figure (1.0255x on resnet50_train).
  static constexpr double kSlack = 0.025;
  // Once the workload has allocated kSettleAfter times live_high() since it last rose, no page
  // moves for the slack (kSettledSlack), one-page growth included; a new high starts over.
  static constexpr double kSettleAfter = 24;
  // Growth of more than one page, and growth once settled, maps fresh pages, within the device's
  // free memory and the memory fraction only (beyond them, pages still move). Moving several pages
  // for one growth re-lays out the large tensors: the repeated step then finds other runs free
  // than the step before, and pages keep moving (or reserved creeps up) in every repetition.
  // Mapped where best fit over unmoving pages puts them, the layout the first steps leave serves
  // the repeated ones: docs/expandable-segments.md.
  static constexpr double kSettledSlack = 1e6;

  ExpandableState() = default;
  /// Expandable segments on a device whose mapping granularity is `page`: PyTorch's pages (its
  /// segment sizes, 20 / 2 MiB, in whole pages), or with `compacting` the granularity itself.
  ExpandableState(std::size_t page, bool compacting) noexcept;

  /// The device's mapping granularity.
  [[nodiscard]] std::size_t page() const noexcept { return page_; }
  /// The pages mapped in the small or the large pool.
  [[nodiscard]] std::size_t page_of(bool small_pool) const noexcept { return small_pool ? small_page_ : large_page_; }

  /// Raises the high-water mark to what a request of `size` bytes reaches, given `live`
  /// (allocated_bytes.all): its peak (which reset_peak_memory_stats may lower; the mark it
  /// raised stays) or its current value with the request.
  void note_request(const Stat& live, std::size_t size) noexcept;
  /// The most bytes ever live, as of the latest note_request().
  [[nodiscard]] std::size_t live_high() const noexcept { return live_high_; }
  /// The fraction above live_high() that fresh pages may reach for a growth that maps `need`
  /// bytes: kSlack for at most one page while the workload still sets highs; kSettledSlack for
  /// more, or once it has allocated kSettleAfter times its high since the last one (it repeats).
  [[nodiscard]] double slack(const Stat& live, std::size_t need) const noexcept {
    return need <= page_ && !settled(live) ? kSlack : kSettledSlack;
  }
  /// Whether the workload repeats: it has allocated kSettleAfter times live_high() since the
  /// high last rose.
  [[nodiscard]] bool settled(const Stat& live) const noexcept;

  /// The planner's view of every expandable segment of the list that starts at `first` (linked
  /// by list_next), afresh; no heap memory once warm.
  ExpandableLayout& refresh(Segment* first);
  /// The view as the latest refresh() left it (a growth may append a new reservation to both).
  [[nodiscard]] ExpandableLayout& view() noexcept { return layout_; }
  [[nodiscard]] std::vector<Segment*>& segments() noexcept { return segments_; }

  /// The planner's view of one segment.
  static void plan_segment(const Segment& s, PlannedSegment& into);

 private:
  std::size_t page_ = 0;
  std::size_t large_page_ = 0;
  std::size_t small_page_ = 0;
  std::size_t live_high_ = 0;
  std::size_t allocated_at_high_ = 0;  // allocated_bytes.all.allocated when live_high_ last rose
  ExpandableLayout layout_;
  std::vector<Segment*> segments_;  // segments_[i] is the segment of layout_.segments[i]
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/expandable_state.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/expandable_state-inl.hpp"
#endif
