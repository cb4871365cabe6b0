// Layer 2: the expandable-segments policy as pure functions. Given a value view of the
// reservations (each one's blocks in address order: mapped or an unmapped hole, free or not) and
// a request, the planner says where the request goes, which pages to map there, how many bytes
// of pages to take back from free blocks elsewhere and which. It touches no allocator, backend or
// lock; CachingAllocator builds the view, asks, and carries the plan out (map, unmap, merge).
//
// Two policies. PyTorch's (expandable_segments:True, c10's find_expandable_block and
// try_allocate_expandable_block): the lowest-addressed hole of the request's (stream, pool),
// together with the free block just before it, whose run of free blocks holds the request; its
// holes are mapped from their fronts in pages of the pool's segment size; pages go back only when
// the cache is emptied (pages_to_release). The compacting one (compacting_expandable_segments:True,
// gpumemprof-only), below.
//
// The compacting policy (why, in a line each):
// - Place: among the runs of free blocks (mapped or holes) of the request's pool and stream, the
//   place that holds it with the fewest hole bytes to map, the first found on ties: every page
//   mapped there is a page taken from elsewhere once reserved is at its budget.
// - Budget: fresh pages are mapped while reserved stays within `slack` above the most bytes ever
//   live (and within the device's free memory and the memory fraction); beyond it, pages lying
//   wholly inside free blocks elsewhere are unmapped first, then mapped here. Moving a page costs
//   a stream synchronization, an unmap and a map (~50-70 us of host time on an H100).
// - Which pages: whole pages of free mapped blocks, the largest runs first (fewest unmap calls),
//   the top pages of each (a block's front stays put); the block the growth itself ends in gives
//   its pages above the growth last, as the next growth there would want them back.
// - Which growths may move pages (one-page ones), and when they stop (the workload repeats), is the
//   caller's: expandable_state.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "gpumemprof/allocator/expandable_layout.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// Where a request goes: the run starting at segments[segment].blocks[block] (its address is
/// the request's), and the hole bytes to map there.
struct GrowthPlace {
  std::size_t segment = 0;
  std::size_t block = 0;
  std::size_t need = 0;  // bytes
};

/// A range to map (addr, bytes), each starting a hole, in address order.
struct MapStep {
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
};

/// A range of whole pages to unmap out of the free mapped block at `block_addr`.
struct UnmapStep {
  std::size_t segment = 0;
  std::uintptr_t block_addr = 0;
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
};

/// What growth may take fresh, and so how many bytes of pages it must take from elsewhere.
struct GrowthBudget {
  std::size_t reserved = 0;   // bytes mapped now
  std::size_t need = 0;       // bytes of holes the growth maps
  std::size_t live_high = 0;  // the most bytes ever live (allocated), this request included
  double slack = 0;           // fraction above live_high that fresh pages may reach
  std::size_t device_free = std::numeric_limits<std::size_t>::max();  // the device's free bytes
  std::optional<std::size_t> allowed_max;                             // the memory fraction's cap
  std::size_t page = 0;
};

// Pages need not be powers of two: PyTorch's large-pool page is 20 MiB.
[[nodiscard]] constexpr std::uintptr_t page_floor(std::uintptr_t a, std::size_t page) noexcept {
  return a / page * page;
}
[[nodiscard]] constexpr std::uintptr_t page_ceil(std::uintptr_t a, std::size_t page) noexcept {
  return page_floor(a + page - 1, page);
}

/// PyTorch's place for `size` bytes on (stream, pool): the lowest-addressed hole (or the free block
/// just before it) from which free blocks and holes hold `size` bytes, or none (a new reservation).
[[nodiscard]] inline std::optional<GrowthPlace> find_first_fit_place(const ExpandableLayout& layout, Stream stream,
                                                                     bool small_pool, std::size_t size) {
  std::optional<GrowthPlace> best;
  std::uintptr_t best_addr = 0;
  for (std::size_t si = 0; si < layout.segments.size(); ++si) {
    const PlannedSegment& s = layout.segments[si];
    if (s.stream != stream || s.small_pool != small_pool) continue;
    const auto& bs = s.blocks;
    for (std::size_t i = 0; i < bs.size(); ++i) {
      if (bs[i].mapped || (best && bs[i].addr >= best_addr)) continue;
      const std::size_t start = i > 0 && bs[i - 1].free ? i - 1 : i;
      std::size_t bytes = 0;
      for (std::size_t j = start; j < bs.size() && bytes < size && bs[j].free; ++j) bytes += bs[j].size;
      if (bytes < size) continue;
      best = GrowthPlace{si, start, 0};
      best_addr = bs[i].addr;
      break;  // later holes of this reservation lie higher
    }
  }
  return best;
}

/// The place for `size` bytes on (stream, pool) with the fewest hole bytes to map, or none (no
/// run holds it, or only a free mapped block would: the free trees find those). Runs alternate
/// free mapped blocks and holes, as both kinds merge; a place starts at a run's first block or at
/// a mapped one (starting at a hole behind a free mapped block would merge with it anyway).
[[nodiscard]] inline std::optional<GrowthPlace> find_growth_place(const ExpandableLayout& layout, Stream stream,
                                                                  bool small_pool, std::size_t size) {
  std::optional<GrowthPlace> best;
  for (std::size_t si = 0; si < layout.segments.size(); ++si) {
    const PlannedSegment& s = layout.segments[si];
    if (s.stream != stream || s.small_pool != small_pool) continue;
    const auto& bs = s.blocks;
    for (std::size_t i = 0; i < bs.size(); ++i) {
      if (!bs[i].free || (!bs[i].mapped && i > 0 && bs[i - 1].free)) continue;
      const std::uintptr_t end = bs[i].addr + size;
      const std::uintptr_t page_end = page_ceil(end, layout.page);
      std::size_t need = 0;
      std::size_t j = i;
      for (; j < bs.size() && bs[j].free && bs[j].addr < end; ++j) {
        if (!bs[j].mapped) need += std::min(bs[j].addr + bs[j].size, page_end) - bs[j].addr;
        if (best && need >= best->need) break;  // cannot win: stop scanning
      }
      const bool holds = j == bs.size() ? s.end >= end : bs[j].addr >= end;
      if (holds && need > 0 && (!best || need < best->need)) best = GrowthPlace{si, i, need};
    }
  }
  return best;
}

/// The hole bytes to map for `size` bytes starting at block `start` of `s`: each hole in
/// [start, start + size), mapped from its front up to the page boundary past the request.
[[nodiscard]] inline std::vector<MapStep> pages_to_map(const PlannedSegment& s, std::size_t start, std::size_t size,
                                                       std::size_t page) {
  std::vector<MapStep> steps;
  const std::uintptr_t begin = s.blocks.at(start).addr;
  const std::uintptr_t page_end = s.base + page_ceil(begin + size - s.base, page);
  for (std::size_t i = start; i < s.blocks.size() && s.blocks[i].addr < begin + size; ++i) {
    const PlannedBlock& b = s.blocks[i];
    if (!b.mapped) steps.push_back({b.addr, std::min(b.addr + b.size, page_end) - b.addr});
  }
  return steps;
}

/// Bytes of pages (a multiple of the page, at most `need`) to take from free blocks elsewhere
/// before mapping `need` bytes: what would take reserved past the budget.
[[nodiscard]] inline std::size_t bytes_to_recycle(const GrowthBudget& g) {
  std::size_t budget = g.live_high + static_cast<std::size_t>(static_cast<double>(g.live_high) * g.slack);
  if (g.reserved + g.need <= budget) {  // about to take fresh memory: only what the device has
    budget =
        std::min(budget, g.reserved + std::min(g.device_free, std::numeric_limits<std::size_t>::max() - g.reserved));
    if (g.allowed_max) budget = std::min(budget, *g.allowed_max);
  }
  const std::size_t over = g.reserved + g.need > budget ? g.reserved + g.need - budget : 0;
  return std::min(g.need, page_ceil(over, g.page));
}

/// Which pages to unmap to take `wanted` bytes, keeping [keep_begin, keep_end) (the growth)
/// mapped: the top pages of free mapped blocks in every reservation, largest first; the block the
/// growth ends in gives its pages above the growth, last. May return less than `wanted`.
[[nodiscard]] inline std::vector<UnmapStep> pages_to_unmap(const ExpandableLayout& layout, std::size_t wanted,
                                                           std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  std::vector<UnmapStep> steps;
  if (wanted == 0) return steps;
  struct Candidate {
    UnmapStep whole;  // every whole page the block may give
    bool beside;      // the block the growth ends in
  };
  std::vector<Candidate> candidates;
  const std::size_t page = layout.page;
  for (std::size_t si = 0; si < layout.segments.size(); ++si) {
    for (const PlannedBlock& b : layout.segments[si].blocks) {
      if (!b.mapped || !b.free) continue;
      std::uintptr_t lo = page_ceil(b.addr, page);
      const std::uintptr_t hi = page_floor(b.addr + b.size, page);
      const bool beside = b.addr < keep_end && keep_begin < b.addr + b.size;
      if (beside) {
        // Kept whole, such a block let reserved pass the budget (gpt2_train, after 11 warm replays).
        if (b.addr < keep_begin) continue;
        lo = std::max(lo, page_ceil(keep_end, page));
      }
      if (hi > lo) candidates.push_back({{si, b.addr, lo, hi - lo}, beside});
    }
  }
  // std::sort, as before the planner existed: equal runs keep the order the figures in
  // bench/RESULTS.md were measured with.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    return x.beside != y.beside ? y.beside : x.whole.bytes > y.whole.bytes;
  });
  std::size_t got = 0;
  for (const Candidate& c : candidates) {
    if (got >= wanted) break;
    const std::size_t take = std::min(c.whole.bytes, wanted - got);
    steps.push_back({c.whole.segment, c.whole.block_addr, c.whole.addr + c.whole.bytes - take, take});
    got += take;
  }
  return steps;
}

/// Every whole page of the free mapped blocks of `s` (empty_cache, the OOM sequence).
[[nodiscard]] inline std::vector<UnmapStep> pages_to_release(const PlannedSegment& s, std::size_t segment,
                                                             std::size_t page) {
  std::vector<UnmapStep> steps;
  for (const PlannedBlock& b : s.blocks) {
    if (!b.mapped || !b.free) continue;
    const std::uintptr_t lo = s.base + page_ceil(b.addr - s.base, page);
    const std::uintptr_t hi = s.base + page_floor(b.addr + b.size - s.base, page);
    if (hi > lo) steps.push_back({segment, b.addr, lo, hi - lo});
  }
  return steps;
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
