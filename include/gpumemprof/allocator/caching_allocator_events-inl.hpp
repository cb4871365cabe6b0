// Layer 2: CachingAllocator's delivery of buffered events to the event sinks (event_sinks.hpp,
// event_buffer.hpp). Included by caching_allocator.hpp; not a header to include on its own.
#pragma once

#include <cstdint>
#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

// The locks are taken conditionally (try_lock unless `wait`), then held by guards that adopt them.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::deliver_events(bool wait) const {
  if (wait) {
    events_mutex_.lock();
  } else if (!events_mutex_.try_lock()) {
    return;  // another delivery runs: it or the next takes these events
  }
  detail::LockGuard delivery(events_mutex_, detail::adopt_lock);
  // Every event stamped before the cut is in its lane once that lane's lock is taken after it.
  const std::uint64_t cut = detail::stamp_fenced();
  {
    if (wait) {
      device_mutex_.lock();
    } else if (!device_mutex_.try_lock()) {
      return;  // a slow path runs: the next delivery
    }
    detail::LockGuard device(device_mutex_, detail::adopt_lock);
    try {  // allocates only while the lists grow (new streams)
      event_lanes_.clear();
      event_shards_.clear();
      event_lanes_.push_back(&slow_events_);
      for (const auto& sh : shards_.all()) {
        event_lanes_.push_back(&sh->events);
        event_shards_.push_back(sh.get());
      }
    } catch (...) {  // no room for the lists: the next delivery
      return;
    }
    slow_events_.take();
  }
  // Each shard alone, the device mutex let go: a slow path may hold a shard across a backend
  // call and then want the device mutex. Shards live as long as the allocator.
  for (Shard* shard : event_shards_) {
    detail::LockGuard lock(shard->mutex);
    shard->events.take();
  }
  deliver_taken(cut);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::take_all_events(bool reserve) const {
  slow_events_.take();
  event_lanes_.clear();
  event_lanes_.push_back(&slow_events_);
  for (const auto& sh : shards_.all()) {
    sh->events.take();
    event_lanes_.push_back(&sh->events);
  }
  if (reserve) {
    for (detail::EventLane* lane : event_lanes_) lane->reserve();
  }
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::deliver_taken(std::uint64_t cut) const {
  for (detail::EventLane* lane : event_lanes_) lane->collect();
  try {
    detail::deliver_events(event_lanes_, cut, sinks_, event_runs_);
  } catch (...) {  // no room in the merge scratch (first deliveries only): the next delivery
  }
}

template <DeviceBackend Backend>
template <class F>
decltype(auto) CachingAllocator<Backend>::change_sinks(F&& change) {
  detail::LockGuard delivery(events_mutex_);
  {
    ExclusiveLock lock(*this, typename ExclusiveLock::ReadersOnly{});
    take_all_events();
  }
  deliver_taken(std::numeric_limits<std::uint64_t>::max());  // to the sinks they happened under
  auto set_active = [this]() GPUMEMPROF_REQUIRES(events_mutex_) {
    ExclusiveLock lock(*this, typename ExclusiveLock::ReadersOnly{});
    take_all_events(/*reserve=*/sinks_.count() != 0);  // may throw: stays inactive
    sinks_.set_active(sinks_.count() != 0);
  };
  if constexpr (std::is_void_v<decltype(change())>) {
    change();
    set_active();
    deliver_taken(std::numeric_limits<std::uint64_t>::max());
  } else {
    auto result = change();
    set_active();
    deliver_taken(std::numeric_limits<std::uint64_t>::max());
    return result;
  }
}

GPUMEMPROF_NAMESPACE_END
