// Layer 2: the stat changes of a fold's records (stats_ledger.hpp), applied in one go: the same
// values, peaks and totals as applying each record to MemoryStats in turn, with a third of the
// work per record.
//
// A fold is the one serial part of the allocator's hot path: every allocation and free of every
// stream passes through one, record by record in stamp order, so its cost per record bounds how
// many operations per second all threads together can make (bench/RESULTS.md, "Threads").
// Applying a record to MemoryStats changes up to 7 pooled stats and 2 pools each, through memory
// that the compiler must assume aliased. Here a fold's records move 5 running series per pool in
// a local accumulator instead, because the records a fold sees come from the hot path only:
//  - an allocation or a free of a block moves allocation and active by the same count, and
//    allocated_bytes and active_bytes by the same bytes; the offset between each two stays fixed
//    during a fold (only exclusive sections change them apart, and they fold first), so active's
//    and active_bytes' values and peaks follow from those of allocation and allocated_bytes;
//  - a stat's peak after a run of changes is the larger of its peak before and the highest value
//    the run reached (its value only rises through increases, and peak >= current always holds);
//  - what a stat counts as allocated is the sum of its increases, and freed = allocated - net.
// Invariant: between begin() and end() nothing else writes the stats (the stats lock is held).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/peak_windows.hpp"
#include "gpumemprof/allocator/stats_journal.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class StatBatch {
 public:
  /// Records of blocks from `max_split` bytes on count as oversize allocations.
  explicit StatBatch(std::size_t max_split) noexcept : max_split_(max_split) {}

  /// Starts a batch at the current values of `s`.
  void begin(const MemoryStats& s) noexcept {
    for (std::size_t p = 0; p < 3; ++p) {
      const Stat* from[kSeries] = {&s.allocated_bytes.pools[p], &s.allocation.pools[p], &s.requested_bytes.pools[p],
                                   &s.inactive_split_bytes.pools[p], &s.inactive_split.pools[p]};
      for (std::size_t j = 0; j < kSeries; ++j) start_[p].v[j] = cur_[p].v[j] = high_[p].v[j] = from[j]->current;
      up_[p] = Row{};
    }
    oversize_start_ = oversize_cur_ = oversize_high_ = s.oversize_allocations.current;
    oversize_up_ = 0;
    window_high_ = std::numeric_limits<std::int64_t>::min();
    allocs_ = frees_ = allocated_bytes_ = freed_bytes_ = 0;
  }

  /// One record's changes, as StatsLedger::apply(r) makes them.
  void add(const StatRecord& r) noexcept {
    const std::int64_t sign = r.is_free ? -1 : 1;
    // A free in an expandable segment leaves inactive_split alone (apply_free).
    const bool inactive = !(r.is_free && r.expandable);
    const Row d{sign * r.size, sign, sign * r.requested, inactive ? r.inactive_bytes : 0,
                inactive ? r.inactive_blocks : 0};
    step(0, d);
    step(static_cast<std::size_t>(r.pool), d);
    if (static_cast<std::size_t>(r.size) >= max_split_) {
      oversize_cur_ += sign;
      oversize_high_ = std::max(oversize_high_, oversize_cur_);
      oversize_up_ += r.is_free ? 0 : 1;
    }
    const auto size = static_cast<std::uint64_t>(r.size);
    if (r.is_free) {
      ++frees_;
      freed_bytes_ += size;
    } else {
      ++allocs_;
      allocated_bytes_ += size;
      window_high_ = std::max(window_high_, cur_[0].v[kBytes]);  // PeakWindows::on_value after an allocation
    }
  }

  /// Writes the batch into `s`, `windows` and the lifetime totals.
  void end(MemoryStats& s, PeakWindows& windows, std::uint64_t& allocations, std::uint64_t& frees,
           std::uint64_t& allocated_bytes, std::uint64_t& freed_bytes) const noexcept {
    for (std::size_t p = 0; p < 3; ++p) {
      // allocation and active, allocated_bytes and active_bytes: the same changes.
      set(s.allocated_bytes.pools[p], p, kBytes);
      set(s.active_bytes.pools[p], p, kBytes);
      set(s.allocation.pools[p], p, kCount);
      set(s.active.pools[p], p, kCount);
      set(s.requested_bytes.pools[p], p, kRequested);
      set(s.inactive_split_bytes.pools[p], p, kInactiveBytes);
      set(s.inactive_split.pools[p], p, kInactiveCount);
    }
    const std::int64_t oversize_net = oversize_cur_ - oversize_start_;
    apply_to(s.oversize_allocations, oversize_net, oversize_high_ - oversize_start_, oversize_up_);
    if (allocs_ != 0) windows.on_value(window_high_);
    allocations += allocs_;
    frees += frees_;
    allocated_bytes += allocated_bytes_;
    freed_bytes += freed_bytes_;
  }

 private:
  enum Series : std::size_t { kBytes, kCount, kRequested, kInactiveBytes, kInactiveCount, kSeries };
  struct Row {
    std::int64_t v[kSeries];
  };

  // Series by series, written out: a loop over them is not unrolled at -O2, and costs twice.
  void step(std::size_t p, const Row& d) noexcept {
    Row& c = cur_[p];
    Row& h = high_[p];
    Row& u = up_[p];
    c.v[0] += d.v[0];
    c.v[1] += d.v[1];
    c.v[2] += d.v[2];
    c.v[3] += d.v[3];
    c.v[4] += d.v[4];
    h.v[0] = std::max(h.v[0], c.v[0]);
    h.v[1] = std::max(h.v[1], c.v[1]);
    h.v[2] = std::max(h.v[2], c.v[2]);
    h.v[3] = std::max(h.v[3], c.v[3]);
    h.v[4] = std::max(h.v[4], c.v[4]);
    u.v[0] += std::max<std::int64_t>(d.v[0], 0);
    u.v[1] += std::max<std::int64_t>(d.v[1], 0);
    u.v[2] += std::max<std::int64_t>(d.v[2], 0);
    u.v[3] += std::max<std::int64_t>(d.v[3], 0);
    u.v[4] += std::max<std::int64_t>(d.v[4], 0);
  }

  // `st` moved as series j of pool p: by its net change, its highest point (relative to the
  // start), and its increases.
  void set(Stat& st, std::size_t p, std::size_t j) const noexcept {
    apply_to(st, cur_[p].v[j] - start_[p].v[j], high_[p].v[j] - start_[p].v[j], up_[p].v[j]);
  }
  static void apply_to(Stat& st, std::int64_t net, std::int64_t rise, std::int64_t up) noexcept {
    st.peak = std::max(st.peak, st.current + rise);
    st.current += net;
    st.allocated += up;
    st.freed += up - net;
  }

  std::size_t max_split_;
  Row start_[3]{}, cur_[3]{}, high_[3]{}, up_[3]{};  // per pool: all, small, large
  std::int64_t oversize_start_ = 0, oversize_cur_ = 0, oversize_high_ = 0, oversize_up_ = 0;
  std::int64_t window_high_ = 0;
  std::uint64_t allocs_ = 0, frees_ = 0, allocated_bytes_ = 0, freed_bytes_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
