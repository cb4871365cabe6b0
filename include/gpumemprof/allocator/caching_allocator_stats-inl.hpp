// Layer 2: CachingAllocator's statistics -- memory_stats(), the resets, the fold of the stat
// journals and the peak windows. Included by caching_allocator.hpp; not a header to include on
// its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template <DeviceBackend Backend>
MemoryStats CachingAllocator<Backend>::memory_stats() const {
  return read_stats([this] { return stats_; });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reset_peak_memory_stats() {
  read_stats([this] { stats_.reset_peak(); });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reset_accumulated_memory_stats() {
  read_stats([this] { stats_.reset_accumulated(); });
}

// A fold is a serial order of the operations that is consistent with real time. It reads the
// cut C first, then visits the shards one by one (lock, take the whole journal, unlock), applies
// the records stamped before C in stamp order and keeps the others for the next fold. (Taking
// only those before C under the lock would copy, under it, all that were stamped while the
// folder waited -- many, when it was descheduled.) No record stamped before C reaches a shard
// after its visit: such a record is appended under the shard's lock by an operation that took
// the lock after the visit released it, so after C was read, and it read its stamp after taking
// the lock; the stamps are monotonic across cores (stamp_clock.hpp), so its stamp is >= C.
// Hence this fold applies every operation stamped before C, later folds only later ones, and
// each shard's records (in its lock's order) are sorted. Operations that overlap a reader are ordered before or after
// it by their stamps, which is a valid linearization.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::fold_locked(bool all_held) const {
  if (!journaling_) return;  // one shard: its hot path wrote the stats directly
  std::uint64_t cut = detail::StatJournal::kAll;
  if (!all_held) {
    cut = detail::stamp_fenced();
    // with_lock() folded on entry and holds every shard: no record can be pending, and the
    // shards cannot be visited. (Read after the cut: the section ends, and new records are
    // stamped, only after this read.)
    if (quiescent_.load(std::memory_order_acquire)) return;
  }
  // No allocation: the journal's buffer is swapped with the shard's empty `fresh` run, and the
  // records left over (stamped at or after C) become the next fold's `carried` run by another
  // swap. The carried records precede every later cut (they were stamped before this visit), so
  // the next fold applies them all and its `carried` run is empty again when it swaps.
  for (const auto& sh : shards_) {
    if (!all_held && sh->parked.load(std::memory_order_relaxed)) continue;  // nothing to take
    if (!all_held) sh->lock_for_fold();
    sh->journal.take_all(sh->fresh.records);
    if (!all_held) sh->mutex.unlock();
    // Carried records first: equal stamps merge in run order. fold_runs_ is reserved: no allocation.
    if (sh->carried.has_before(cut)) fold_runs_.push_back(&sh->carried);
    if (sh->fresh.has_before(cut)) fold_runs_.push_back(&sh->fresh);
  }
  if (!fold_runs_.empty()) {
    std::lock_guard lock(stats_lock_);
    detail::merge_by_stamp(fold_runs_, cut, [this](const detail::StatRecord& r) { apply_record(r); });
  }
  for (const auto& sh : shards_) {
    if (sh->fresh.records.empty()) continue;
    if (sh->carried.records.empty()) {
      sh->carried.records.swap(sh->fresh.records);
    } else {
      sh->carried.add(sh->fresh.records);  // not reached while stamps are monotonic; may allocate
    }
  }
}

template <DeviceBackend Backend>
std::uint64_t CachingAllocator<Backend>::open_peak_window() {
  return read_stats([this] { return windows_.open(stats_.allocated_bytes[StatPool::all].current); });
}

template <DeviceBackend Backend>
std::int64_t CachingAllocator<Backend>::close_peak_window(std::uint64_t id) {
  return read_stats([this, id] { return windows_.close(id); });
}

template <DeviceBackend Backend>
std::int64_t CachingAllocator<Backend>::peak_window(std::uint64_t id) const {
  return read_stats([this, id] { return windows_.peak(id); });
}

GPUMEMPROF_NAMESPACE_END
