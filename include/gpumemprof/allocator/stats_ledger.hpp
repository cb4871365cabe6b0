// Layer 2: the allocator's statistics -- MemoryStats, the peak windows and the lifetime totals --
// and the one protocol by which any number of writers record into them and any thread reads them.
//
// Writers are lanes: each stream shard of the allocator is a Lane, and the lane's lock
// (Lane::mutex) orders that stream's operations. A writer calls record(lane, r) under its lane's
// lock (reserve(lane) first, so that record cannot throw) and after_record() once it let the lock
// go; readers call read(f), which runs f(state) with the state exact: every operation that
// completed before read() was called is in it, none that started after. An exclusive section
// (the allocator's slow paths) takes lock_all(), which holds every lane and the stats lock, and
// writes state() directly.
//
// Inside, two modes; callers see neither:
//  - direct (at most one lane): record() applies the change at once. The one lane's lock orders
//    every writer, so read() takes that lock before the stats lock, unless an exclusive section
//    holds it (a with_lock() reader: quiescent; a backend call: parked) -- then no writer runs.
//  - journaled (from the second lane on): record() appends the change, stamped with a clock
//    readable on every core (stamp_clock.hpp), to its lane's journal; a fold applies every
//    journal's records in stamp order under the stats lock -- by the writer whose record makes
//    its journal a multiple of kFoldAt long, by lock_all(), and by every read().
// Forcing the journal onto one stream costs 17-70% on one thread (measured 2026-11-26), hence
// the direct mode.
//
// Invariants.
//  - The mode goes from direct to journaled once (the second add_lane), never back, under the
//    fold lock and the first lane's lock (direct mode's only writer): writers read it under their
//    lane's lock, readers under the fold lock, and both see the same mode.
//  - Journaled: the state holds exactly the records stamped before the last fold's cut; later
//    records wait in their lane's journal or its `carried` run, sorted by stamp (fold()).
//  - `quiescent_` and `parked_` change only under the fold lock, while the lanes they name are
//    held by an exclusive section that folded them: a reader that sees one set skips the lane
//    locks safely.
// Lock order: the fold lock, the lanes in creation order, the stats lock (innermost). The
// allocator's device mutex comes before all of them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/peak_windows.hpp"
#include "gpumemprof/allocator/stats_journal.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/spin_lock.hpp"
#include "gpumemprof/detail/stamp_clock.hpp"
#include "gpumemprof/detail/thread_annotations.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class StatsLedger {
 public:
  // A writer whose record makes its journal a multiple of this long folds (once per kFoldAt
  // operations: a fold under way elsewhere is not retried on every operation).
  static constexpr std::size_t kFoldAt = 256;
  // Past this many records (40 MiB) a journal's writer waits for the fold lock: only a folder
  // stopped for long (a debugger) gets there. Waiting earlier costs more than it saves: on a
  // loaded 2-core VM a folder is often descheduled for milliseconds, and at 16 * kFoldAt the
  // waits made two threads 3-4x slower.
  static constexpr std::size_t kFoldWait = 4096 * kFoldAt;

  /// Lifetime totals: never reset (reset_accumulated leaves them alone).
  struct Totals {
    std::uint64_t allocations = 0, frees = 0, allocated_bytes = 0, freed_bytes = 0;
  };
  /// What read() shows and exclusive sections write.
  struct State {
    MemoryStats stats;
    PeakWindows windows;
    Totals totals;
  };

  /// One writer (a stream shard derives from it): its lock, and its journal of stat changes.
  /// Registered with add_lane(); must outlive the ledger's use of it.
  class alignas(64) Lane {
   public:
    Lane() {
      carried_.records.reserve(2 * kFoldAt);
      fresh_.records.reserve(2 * kFoldAt);
    }
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    // A spin lock, not std::mutex: one atomic exchange per hot operation fewer (unlock is a
    // store), and waiters on a shared stream spin instead of sleeping (measured on the H100
    // host's 16 cores, bench/RESULTS.md). Slow paths may hold it across a device call; waiters
    // then yield.
    SpinLock mutex;
    /// The writer's entry, before taking `mutex`: waits while a fold wants it (no lock held).
    void yield_to_fold() const noexcept {
      if (GPUMEMPROF_UNLIKELY(fold_waiting_.load(std::memory_order_relaxed))) {
        spin_while([this] { return fold_waiting_.load(std::memory_order_relaxed); });
      }
    }
    /// A folder's or an exclusive section's lock (the fold lock held: one such taker at a time).
    void lock_for_fold() GPUMEMPROF_ACQUIRE(mutex) {
      fold_waiting_.store(true, std::memory_order_relaxed);
      mutex.lock();
      fold_waiting_.store(false, std::memory_order_relaxed);
    }

   private:
    friend class StatsLedger;
    // A fold waits for `mutex` (on the same line): the writer lets it go first, else the owner,
    // relocking within nanoseconds of each unlock, starves the folder's spin.
    std::atomic<bool> fold_waiting_{false};
    StatJournal journal_ GPUMEMPROF_GUARDED_BY(mutex){2 * kFoldAt};  // journaled mode only
    // Under the fold lock: the records a fold left (stamped after its cut), and those it took
    // from the journal (by swapping buffers; empty between folds).
    alignas(64) StatRun carried_;
    StatRun fresh_;
    // Set under the fold lock: held across a backend call by an exclusive section
    // (unlock_all(kept)), with nothing to fold. Folds and read() skip it instead of waiting.
    mutable std::atomic<bool> parked_{false};
  };

  /// `max_split_size`: blocks from this size on count as oversize; `max_split_size_stat`: the
  /// max_split_size value MemoryStats reports.
  StatsLedger(std::size_t max_split_size, std::int64_t max_split_size_stat) : max_split_(max_split_size) {
    state_.stats.max_split_size = max_split_size_stat;
  }

  // --- writers ---

  /// Registers a new writer, not yet known to anyone else. The second one switches to journals,
  /// under the first one's lock (its writer reads the mode under it).
  void add_lane(Lane& lane) GPUMEMPROF_EXCLUDES(fold_mutex_) {
    LockGuard fold(fold_mutex_);
    if (!journaling_ && !lanes_.empty()) {
      LockGuard first(lanes_.front()->mutex);
      journaling_ = true;
    }
    push_lane(lane);
  }
  /// add_lane() inside lock_all(): the new lane is taken too (unlock_all() lets it go with the rest).
  void add_lane_locked(Lane& lane) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    // Every lane is held, so the first lane's writer is not running. (The analysis cannot see
    // the lanes taken by lock_all(), nor `lane` left held for unlock_all().)
    journaling_ = journaling_ || !lanes_.empty();
    push_lane(lane);
    lane.mutex.lock();
  }
  /// Makes sure the next record(lane, ...) cannot throw. May throw std::bad_alloc.
  void reserve(Lane& lane) GPUMEMPROF_REQUIRES(lane.mutex) {
    if (journaling_) lane.journal_.reserve_one();
  }
  /// The stat changes of one operation of `lane`'s writer. Returns what after_record() needs.
  std::size_t record(Lane& lane, const StatRecord& r) GPUMEMPROF_REQUIRES(lane.mutex) {
    if (journaling_) return lane.journal_.append(r);
    apply_direct(r);
    return 0;
  }
  /// After record(), with no lock held: folds when the journal reached a multiple of kFoldAt,
  /// unless another thread is folding (that fold takes this journal too). Past kFoldWait records
  /// it waits for the fold lock: a journal must not grow without bound.
  void after_record(std::size_t journal_length) GPUMEMPROF_EXCLUDES(fold_mutex_) {
    if (GPUMEMPROF_UNLIKELY(journal_length != 0 && journal_length % kFoldAt == 0)) try_fold(journal_length);
  }

  // --- exclusive sections ---

  /// Takes the fold lock, every lane but `kept` (held by the caller already, or parked: see
  /// unlock_all) and, with_stats, the stats lock; folds every journal. Without the stats
  /// (a reader that holds every lane, such as with_lock()), the ledger is quiescent until
  /// unlock_all(): read() and folds skip the lanes and read the stats as they are.
  void lock_all(const Lane* kept, bool with_stats) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    // The set of lanes is known at run time only; the order is the documented one.
    fold_mutex_.lock();
    if (kept != nullptr) kept->parked_.store(false, std::memory_order_relaxed);
    for (Lane* l : lanes_) {
      if (l != kept) l->lock_for_fold();
    }
    fold(/*all_held=*/true);
    if (with_stats) {
      stats_lock_.lock();
    } else {
      quiescent_.store(true, std::memory_order_release);
      fold_mutex_.unlock();
    }
  }
  /// Lets go what lock_all(nullptr, with_stats) took; `kept` stays held by the caller and is
  /// parked: folds and read() skip it until lock_all(kept, ...) takes the rest back.
  void unlock_all(const Lane* kept, bool with_stats) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    if (with_stats) {
      stats_lock_.unlock();
    } else {
      // A reader that saw quiescent_ reads holding the fold lock and no lane (read()): the lanes
      // stay held until it is done. Taking the fold lock with the lanes held inverts the lock
      // order, safely: while quiescent_ is set no holder of the fold lock waits for a lane
      // (folds and read() skip them), and the allocator's device mutex (held) keeps out every
      // other taker of lanes.
      fold_mutex_.lock();
      quiescent_.store(false, std::memory_order_relaxed);
    }
    // Under the fold lock (readers take no lane): the kept lane's journal is empty, all folded
    // by lock_all(), and stays so while it is parked.
    if (kept != nullptr) kept->parked_.store(true, std::memory_order_relaxed);
    for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) {
      if (*it != kept) (*it)->mutex.unlock();
    }
    fold_mutex_.unlock();
  }
  /// The state, for an exclusive section (lock_all(..., true)).
  State& state() GPUMEMPROF_REQUIRES(stats_lock_) { return state_; }
  /// The stats lock, for annotations: lock_all(..., true) takes it.
  SpinLock& stats_lock() GPUMEMPROF_RETURN_CAPABILITY(stats_lock_) { return stats_lock_; }

  /// Applies the changes of an allocation, a block no longer allocated (deallocate), or a block
  /// free again, to the state (exclusive sections; folds).
  void apply(const StatRecord& r) noexcept GPUMEMPROF_REQUIRES(stats_lock_) {
    if (r.is_free) {
      apply_unallocate(r.pool, r.size);
      apply_free(r);
    } else {
      apply_alloc(r);
    }
  }
  void apply_alloc(const StatRecord& r) noexcept GPUMEMPROF_REQUIRES(stats_lock_);
  void apply_unallocate(StatPool pool, std::int64_t size) noexcept GPUMEMPROF_REQUIRES(stats_lock_);
  void apply_free(const StatRecord& r) noexcept GPUMEMPROF_REQUIRES(stats_lock_);

  // --- readers ---

  /// Runs f(State&) with the state exact (see the top), under the stats lock; f must not call
  /// the allocator. Returns f's result.
  template <class F>
  decltype(auto) read(F&& f) GPUMEMPROF_EXCLUDES(fold_mutex_, stats_lock_) {
    LockGuard fold_lock(fold_mutex_);
    Lane* held = nullptr;
    if (journaling_) {
      fold(/*all_held=*/false);
    } else {
      held = direct_writer();
    }
    struct Release {
      Lane* lane;
      ~Release() GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {  // the lane direct_writer() took, if any
        if (lane != nullptr) lane->mutex.unlock();
      }
    } release{held};
    LockGuard stats(stats_lock_);
    return std::forward<F>(f)(state_);
  }

 private:
  void push_lane(Lane& lane) GPUMEMPROF_REQUIRES(fold_mutex_) {
    fold_runs_.reserve(2 * (lanes_.size() + 1));  // two runs per lane: no allocation in a fold
    lanes_.push_back(&lane);
  }
  // Direct mode: the lane whose lock orders every writer, taken; nullptr when none is needed (no
  // lane yet, or an exclusive section holds it: quiescent or parked, nothing changes).
  Lane* direct_writer() GPUMEMPROF_REQUIRES(fold_mutex_) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    // Conditionally taken (read() lets it go): the analysis cannot follow a lock returned.
    if (lanes_.empty() || quiescent_.load(std::memory_order_acquire) ||
        lanes_.front()->parked_.load(std::memory_order_relaxed)) {
      return nullptr;
    }
    lanes_.front()->lock_for_fold();
    return lanes_.front();
  }
  // Direct mode, under the one lane's lock: that lock, not the stats lock, orders every writer
  // and reader of the state (read() takes it before the stats lock; exclusive sections hold it).
  void apply_direct(const StatRecord& r) noexcept GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS { apply(r); }
  void fold(bool all_held) GPUMEMPROF_REQUIRES(fold_mutex_);
  GPUMEMPROF_NOINLINE void try_fold(std::size_t journal_length) GPUMEMPROF_EXCLUDES(fold_mutex_) {
    if (fold_mutex_.try_lock()) {
      fold(false);
      fold_mutex_.unlock();
    } else if (journal_length >= kFoldWait) {
      LockGuard lock(fold_mutex_);
      fold(false);
    }
  }
  void apply_inactive(const StatRecord& r) noexcept GPUMEMPROF_REQUIRES(stats_lock_);

  const std::size_t max_split_;
  // Read on every record, written once: on a line apart from what folds write.
  bool journaling_ = false;

  // Folds: one at a time. Written per fold, so on a line of its own.
  alignas(64) Mutex fold_mutex_ GPUMEMPROF_ACQUIRED_BEFORE(stats_lock_);
  std::atomic<bool> quiescent_{false};  // an exclusive reader (lock_all without stats) holds every lane
  std::vector<Lane*> lanes_ GPUMEMPROF_GUARDED_BY(fold_mutex_);         // creation order
  std::vector<StatRun*> fold_runs_ GPUMEMPROF_GUARDED_BY(fold_mutex_);  // a fold's non-empty runs

  // The innermost lock, on lines of its own.
  alignas(64) SpinLock stats_lock_;
  State state_ GPUMEMPROF_GUARDED_BY(stats_lock_);
};

// A fold is a serial order of the operations that is consistent with real time. It reads the
// cut C first, then visits the lanes one by one (lock, take the whole journal, unlock), applies
// the records stamped before C in stamp order and keeps the others for the next fold. (Taking
// only those before C under the lock would copy, under it, all that were stamped while the
// folder waited -- many, when it was descheduled.) No record stamped before C reaches a lane
// after its visit: such a record is appended under the lane's lock by an operation that took
// the lock after the visit released it, so after C was read, and it read its stamp after taking
// the lock; the stamps are monotonic across cores (stamp_clock.hpp), so its stamp is >= C.
// Hence this fold applies every operation stamped before C, later folds only later ones, and
// each lane's records (in its lock's order) are sorted. Operations that overlap a reader are
// ordered before or after it by their stamps, which is a valid linearization.
inline void StatsLedger::fold(bool all_held) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
  // Lanes are taken one at a time (all_held: by lock_all already), chosen at run time.
  if (!journaling_) return;  // direct mode: the writer applied its changes itself
  std::uint64_t cut = StatJournal::kAll;
  if (!all_held) {
    cut = stamp_fenced();
    // An exclusive reader folded on entry and holds every lane: no record can be pending, and
    // the lanes cannot be visited. (Read after the cut: the section ends, and new records are
    // stamped, only after this read.)
    if (quiescent_.load(std::memory_order_acquire)) return;
  }
  // No allocation: the journal's buffer is swapped with the lane's empty `fresh` run, and the
  // records left over (stamped at or after C) become the next fold's `carried` run by another
  // swap. The carried records precede every later cut (they were stamped before this visit), so
  // the next fold applies them all and its `carried` run is empty again when it swaps.
  for (Lane* l : lanes_) {
    if (!all_held && l->parked_.load(std::memory_order_relaxed)) continue;  // nothing to take
    if (!all_held) l->lock_for_fold();
    l->journal_.take_all(l->fresh_.records);
    if (!all_held) l->mutex.unlock();
    // Carried records first: equal stamps merge in run order. fold_runs_ is reserved: no allocation.
    if (l->carried_.has_before(cut)) fold_runs_.push_back(&l->carried_);
    if (l->fresh_.has_before(cut)) fold_runs_.push_back(&l->fresh_);
  }
  if (!fold_runs_.empty()) {
    LockGuard lock(stats_lock_);
    // The lambda runs inside merge_by_stamp, under `lock`; the analysis checks lambdas alone.
    merge_by_stamp(fold_runs_, cut, [this](const StatRecord& r) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS { apply(r); });
  }
  for (Lane* l : lanes_) {
    if (l->fresh_.records.empty()) continue;
    if (l->carried_.records.empty()) {
      l->carried_.records.swap(l->fresh_.records);
    } else {
      l->carried_.add(l->fresh_.records);  // not reached while stamps are monotonic; may allocate
    }
  }
}

inline void StatsLedger::apply_alloc(const StatRecord& r) noexcept {
  const StatPool sp = r.pool;
  MemoryStats& s = state_.stats;
  apply_inactive(r);
  s.allocation.increase(sp, 1);
  s.allocated_bytes.increase(sp, r.size);
  s.active.increase(sp, 1);
  s.active_bytes.increase(sp, r.size);
  s.requested_bytes.increase(sp, r.requested);
  if (static_cast<std::size_t>(r.size) >= max_split_) s.oversize_allocations.increase(1);
  state_.windows.on_value(s.allocated_bytes[StatPool::all].current);
  ++state_.totals.allocations;
  state_.totals.allocated_bytes += static_cast<std::uint64_t>(r.size);
}

inline void StatsLedger::apply_unallocate(StatPool sp, std::int64_t size) noexcept {
  MemoryStats& s = state_.stats;
  s.allocation.decrease(sp, 1);
  s.allocated_bytes.decrease(sp, size);
  if (static_cast<std::size_t>(size) >= max_split_) s.oversize_allocations.decrease(1);
  ++state_.totals.frees;
  state_.totals.freed_bytes += static_cast<std::uint64_t>(size);
}

inline void StatsLedger::apply_free(const StatRecord& r) noexcept {
  const StatPool sp = r.pool;
  MemoryStats& s = state_.stats;
  if (!r.expandable) apply_inactive(r);
  s.active.decrease(sp, 1);
  s.active_bytes.decrease(sp, r.size);
  s.requested_bytes.decrease(sp, r.requested);
}

inline void StatsLedger::apply_inactive(const StatRecord& r) noexcept {
  MemoryStats& s = state_.stats;
  if (r.inactive_bytes > 0) s.inactive_split_bytes.increase(r.pool, r.inactive_bytes);
  if (r.inactive_bytes < 0) s.inactive_split_bytes.decrease(r.pool, -r.inactive_bytes);
  if (r.inactive_blocks > 0) s.inactive_split.increase(r.pool, r.inactive_blocks);
  if (r.inactive_blocks < 0) s.inactive_split.decrease(r.pool, -r.inactive_blocks);
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
