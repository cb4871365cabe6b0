// Layer 2: CachingAllocator's member templates that callers instantiate -- with_lock_then (a
// reader's view under the allocator's lock, then the events it saw delivered) and the segment
// views LockedView walks. Included by caching_allocator.hpp in both modes (the compiled library
// cannot instantiate a caller's template); not a header to include on its own.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

// A consistent view of the allocator, valid only inside with_lock().
template <DeviceBackend Backend>
class CachingAllocator<Backend>::LockedView {
 public:
  /// Visits every segment, in creation order.
  template <class F>
  void visit_segments(F&& f) const {
    held();
    for (const Segment* s = a_.segment_list_.head(); s != nullptr; s = s->list_next) a_.for_each_view(*s, f);
  }
  [[nodiscard]] const MemoryStats& stats() const noexcept { return stats_; }

 private:
  friend class CachingAllocator;
  // The stats are copied once: with every shard held no allocation or free changes them, and
  // f() then runs without the stats lock, so samplers (gauges(), peak windows) keep reading
  // while a snapshot is taken.
  explicit LockedView(const CachingAllocator& a) GPUMEMPROF_REQUIRES(a.device_mutex_)
      : a_(a), stats_(a.ledger_.read([](const detail::StatsLedger::State& s) { return s.stats; })) {}
  // A LockedView is made only under the exclusive lock (its constructor requires the device
  // mutex, and the analysis checks that) and is used only inside with_lock(), which holds that
  // lock until f() returns: whenever a view is used, the device mutex is held.
  void held() const noexcept GPUMEMPROF_ASSERT_CAPABILITY(a_.device_mutex_) {}
  const CachingAllocator& a_;
  MemoryStats stats_;
};

template <DeviceBackend Backend>
template <class F, class G>
decltype(auto) CachingAllocator<Backend>::with_lock_then(F&& f, G&& then) const {
  detail::LockGuard delivery(delivery_.lock());
  auto seen = [&]() GPUMEMPROF_REQUIRES(delivery_.lock()) {
    ExclusiveLock lock(*this, typename ExclusiveLock::ReadersOnly{});
    delivery_.take_all(shards_, device_mutex_);
    return std::forward<F>(f)(LockedView(*this));
  }();
  delivery_.deliver_taken(std::numeric_limits<std::uint64_t>::max());
  return std::forward<G>(then)(std::move(seen));
}

template <DeviceBackend Backend>
template <class F>
void CachingAllocator<Backend>::for_each_view(const Segment& s, F&& f) const {
  const Block* b = s.head;
  while (b != nullptr) {
    if (!b->mapped) {
      b = b->next();
      continue;
    }
    SegmentView v;  // a plain segment, or one run of mapped pages of an expandable one
    v.address = b->addr;
    v.stream = s.stream;
    v.is_large = !s.small_pool;
    v.is_expandable = s.expandable;
    v.pool_id = {s.pool_id[0], s.pool_id[1]};
    v.context = s.context;
    for (; b != nullptr && b->mapped; b = b->next()) {
      v.size += b->size;
      v.blocks.push_back(view_of(*b));
    }
    f(std::as_const(v));
  }
}

GPUMEMPROF_NAMESPACE_END
