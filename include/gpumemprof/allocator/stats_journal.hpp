// Layer 2: a per-shard journal of statistic changes. The allocator's hot path appends one record
// per allocation or free to its stream shard's journal (under the shard lock it holds anyway)
// instead of writing shared counters; a fold later applies the records of all shards in stamp
// order, so the statistics (peaks included) are those of one serial order of the operations.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/stamp_clock.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// The stat changes of one allocation (is_free false) or free of a block.
struct StatRecord {
  std::uint64_t stamp = 0;               ///< stamp_now() under the shard lock
  std::int64_t size = 0;                 ///< the block's bytes (before any merge, for a free)
  std::int64_t requested = 0;            ///< bytes asked for
  std::int64_t inactive_bytes = 0;       ///< change of inactive_split_bytes
  std::int32_t inactive_blocks = 0;      ///< change of inactive_split
  StatPool pool = StatPool::large_pool;  ///< small_pool or large_pool
  bool is_free = false;
  bool expandable = false;  ///< an expandable segment's block: inactive_split is not counted
};

/// One shard's records, appended and taken under that shard's lock.
class StatJournal {
 public:
  static constexpr std::uint64_t kAll = std::numeric_limits<std::uint64_t>::max();

  explicit StatJournal(std::size_t capacity) { records_.reserve(capacity); }

  /// Appends `r`, stamped now (never below the previous stamp). Returns the journal's length.
  std::size_t append(StatRecord r) {
    last_ = std::max(last_, stamp_now());
    r.stamp = last_;
    records_.push_back(r);
    return records_.size();
  }

  /// Moves the records stamped before `cut` (all for kAll) into `out`, which must be empty; the
  /// rest stay. Swaps buffers, so a steady state allocates nothing.
  void take_before(std::uint64_t cut, std::vector<StatRecord>& out) {
    out.swap(records_);
    if (cut == kAll) return;
    auto split = out.end();
    while (split != out.begin() && std::prev(split)->stamp >= cut) --split;
    records_.assign(split, out.end());
    out.erase(split, out.end());
  }

  [[nodiscard]] std::size_t size() const noexcept { return records_.size(); }

 private:
  std::vector<StatRecord> records_;
  std::uint64_t last_ = 0;
};

/// Records taken from one journal for a fold, and the fold's position in them.
struct StatRun {
  std::vector<StatRecord> records;
  std::size_t next = 0;
};

/// Calls `apply(record)` for every record of the runs (each sorted by stamp) in stamp order,
/// equal stamps (operations that overlapped in time) in run order, and empties the runs.
/// `run_of(element)` gives an element's StatRun.
template <class Range, class RunOf, class F>
void merge_by_stamp(const Range& range, RunOf&& run_of, F&& apply) {
  for (;;) {
    StatRun* best = nullptr;
    for (const auto& e : range) {
      StatRun& r = run_of(e);
      if (r.next < r.records.size() && (best == nullptr || r.records[r.next].stamp < best->records[best->next].stamp)) {
        best = &r;
      }
    }
    if (best == nullptr) break;
    apply(best->records[best->next++]);
  }
  for (const auto& e : range) {
    StatRun& r = run_of(e);
    r.records.clear();
    r.next = 0;
  }
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
