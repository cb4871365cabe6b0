// Layer 2: CachingAllocator's exclusive section -- the scoped lock that slow paths, introspection
// and with_lock hold: the device mutex, then every lock of the statistics ledger (the fold lock,
// every shard in creation order, the stats lock), in the order the allocator's map declares.
// Included by caching_allocator.hpp; not a header to include on its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

// The device mutex, then the ledger's lock_all(): the fold lock, every shard (creation order)
// and the stats lock -- nothing else runs. Every journal is folded on entry, so the slow path
// reads and writes exact stats (stats_). The analysis sees the device mutex; the shards, a set
// known at run time, it cannot see (StatsLedger::lock_all). The expandable executor names the
// device mutex and the stats lock too (executor_.device_lock(), stats_lock(): the same locks), so
// they are acquired under both names.
template <DeviceBackend Backend>
class GPUMEMPROF_SCOPED_CAPABILITY CachingAllocator<Backend>::ExclusiveLock {
 public:
  // Not analysed inside (take and give_back); the analysis trusts the annotations.
  explicit ExclusiveLock(const CachingAllocator& a)
      GPUMEMPROF_ACQUIRE(a.device_mutex_, a.ledger_.stats_lock(), a.executor_.device_lock(),
                         a.executor_.stats_lock()) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS : a_(a),
                                                                                          stats_(true) {
    take(false, nullptr);
  }
  // For readers only (with_lock), which read the stats through the ledger: the fold lock and
  // the stats are let go -- no journal grows while every shard is held, so readers meanwhile
  // fold nothing (the ledger is quiescent) and read the stats.
  struct ReadersOnly {};
  ExclusiveLock(const CachingAllocator& a, ReadersOnly)
      GPUMEMPROF_ACQUIRE(a.device_mutex_, a.executor_.device_lock()) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS
      : a_(a),
        stats_(false) {
    take(false, nullptr);
  }
  ~ExclusiveLock() GPUMEMPROF_RELEASE() GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS { unlock(); }
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;
  // Lets go early (throw_oom, before calling observers). Not annotated RELEASE: callers get the
  // lock by reference, and the analysis would not know it held.
  void unlock() noexcept GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    if (!held_) return;
    held_ = false;
    give_back(false, nullptr);
  }
  // Runs f() -- one backend call that may wait -- holding only the device mutex (unless
  // !keep_device) and `keep_shard`'s lock (if any), and takes the rest back before returning or
  // throwing. With the device mutex kept, only the free trees of the shards let go, the pointer
  // map and the stats may have moved meanwhile; without it, anything.
  template <class F>
  decltype(auto) released_during(bool keep_device, const Shard* keep_shard, F&& f) {
    give_back(keep_device, keep_shard);
    struct Retake {
      ExclusiveLock& lock;
      bool device;
      const Shard* shard;
      ~Retake() { lock.take(device, shard); }
    } retake{*this, keep_device, keep_shard};
    return std::forward<F>(f)();
  }

 private:
  // Takes what give_back(device_held, kept) let go: the device mutex first, then the ledger's
  // locks (a kept shard stays parked meanwhile, and every journal is folded again once all
  // shards are back: other streams went on meanwhile). Not analysed: the analysis would see a
  // scoped lock released and taken again inside its own members.
  void take(bool device_held, const Shard* kept) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    if (!device_held) a_.device_mutex_.lock();
    a_.ledger_.lock_all(kept, stats_);
  }
  void give_back(bool keep_device, const Shard* kept) noexcept GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    a_.ledger_.unlock_all(kept, stats_);
    if (!keep_device) a_.device_mutex_.unlock();
  }
  const CachingAllocator& a_;
  bool stats_;
  bool held_ = true;
};

GPUMEMPROF_NAMESPACE_END
