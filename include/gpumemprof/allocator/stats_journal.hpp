// Layer 2: a per-shard journal of statistic changes. The allocator's hot path appends one record
// per allocation or free to its stream shard's journal (under the shard lock it holds anyway)
// instead of writing shared counters; a fold later applies the records of all shards in stamp
// order, so the statistics (peaks included) are those of one serial order of the operations.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
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

  /// Makes sure the next append cannot throw. May throw std::bad_alloc.
  void reserve_one() {
    if (GPUMEMPROF_UNLIKELY(records_.size() == records_.capacity())) records_.reserve(2 * records_.capacity() + 1);
  }
  /// Appends `r`, stamped now (never below the previous stamp). Returns the journal's length.
  /// Throws only where reserve_one() was not called.
  std::size_t append(StatRecord r) {
    last_ = std::max(last_, stamp_now());
    r.stamp = last_;
    records_.push_back(r);
    return records_.size();
  }

  /// Moves every record into `out`, which must be empty: swaps buffers, O(1) under the lock,
  /// and a steady state allocates nothing.
  void take_all(std::vector<StatRecord>& out) noexcept { out.swap(records_); }

 private:
  std::vector<StatRecord> records_;
  std::uint64_t last_ = 0;
};

/// Records taken from one journal (or event buffer) and not applied yet (a fold applies those
/// before its cut and carries the rest to the next fold), sorted by stamp.
template <class Record>
struct StampedRun {
  std::vector<Record> records;
  std::size_t next = 0;    ///< records before it are applied
  std::size_t stop = 0;    ///< during a merge: the end of the records before its cut
  std::uint64_t head = 0;  ///< during a merge: records[next].stamp, read where the runs are compared

  /// Appends the records of `taken` (stamped after every record here) and empties it.
  void add(std::vector<Record>& taken) {
    if (records.empty()) {
      records.swap(taken);
    } else {
      records.insert(records.end(), taken.begin(), taken.end());
      taken.clear();
    }
  }
  [[nodiscard]] bool has_before(std::uint64_t cut) const noexcept {
    return next < records.size() && records[next].stamp < cut;
  }
};
using StatRun = StampedRun<StatRecord>;

/// Calls `apply(first, count)` for every record stamped before `cut` in `runs` (each sorted by
/// stamp, each with such a record), in spans of consecutive records of one run, in stamp order,
/// equal stamps (operations that overlapped in time) in run order; the runs keep only their later
/// records, and the list is emptied. One run is one span: a batch, not a call per record.
///
/// Cost: one pass over the runs' heads per span (the smallest and the second smallest head, by
/// stamp and then run order), and a forward scan of the span. Runs of threads on different
/// streams interleave record by record, so spans are short and this pass is the price of a
/// record: no binary search, no second pass (docs/allocator-threads.md).
template <class Run, class F>
void merge_spans_by_stamp(std::vector<Run*>& runs, std::uint64_t cut, F&& apply) {
  for (Run* r : runs) {
    r->next = 0;
    const auto& v = r->records;
    r->head = v.front().stamp;
    r->stop =
        v.back().stamp < cut
            ? v.size()
            : static_cast<std::size_t>(
                  std::partition_point(v.begin(), v.end(), [cut](const auto& x) { return x.stamp < cut; }) - v.begin());
  }
  // Applies run `i`'s records from its head until `limit` (at least the head); a run with none
  // before the cut left keeps only its later records and leaves the list.
  auto emit = [&runs, &apply](std::size_t i, std::uint64_t limit) {
    Run& r = *runs[i];
    const auto* const data = r.records.data();
    std::size_t j = r.next + 1;
    while (j < r.stop && data[j].stamp < limit) ++j;
    apply(data + r.next, j - r.next);
    r.next = j;
    if (j < r.stop) {
      r.head = data[j].stamp;
      return;
    }
    r.records.erase(r.records.begin(), r.records.begin() + static_cast<std::ptrdiff_t>(j));
    r.next = 0;
    runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
  };
  while (runs.size() > 1) {
    // The head that comes first (lowest stamp, then lowest run index: strict comparisons in
    // run order keep the first of equals) and the one that comes second.
    std::size_t best = 0;
    std::uint64_t best_stamp = runs[0]->head;
    std::size_t second = 0;
    std::uint64_t second_stamp = StatJournal::kAll;
    for (std::size_t i = 1; i < runs.size(); ++i) {
      const std::uint64_t s = runs[i]->head;
      if (s < best_stamp) {
        second = best;
        second_stamp = best_stamp;
        best = i;
        best_stamp = s;
      } else if (s < second_stamp) {
        second = i;
        second_stamp = s;
      }
    }
    // The best run's records go on while they come before the second head: a lower stamp, or an
    // equal one when the best run comes first (heads are below the cut: no overflow).
    emit(best, second < best ? second_stamp : second_stamp + 1);
  }
  if (!runs.empty()) emit(0, cut);  // the last run: one span
}

/// Calls `apply(record)` for every record stamped before `cut` in `runs`, as merge_spans_by_stamp.
template <class Run, class F>
void merge_by_stamp(std::vector<Run*>& runs, std::uint64_t cut, F&& apply) {
  merge_spans_by_stamp(runs, cut, [&apply](const auto* first, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) apply(first[i]);
  });
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
