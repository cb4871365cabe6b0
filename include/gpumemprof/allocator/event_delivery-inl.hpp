// Layer 2: the bodies of EventDelivery (event_delivery.hpp): `inline` in header-only mode, defined
// once in the compiled library (lib/event_delivery.cpp) otherwise. Not a header to include on its
// own.
#pragma once

#include <cstdint>

#include "gpumemprof/allocator/event_delivery.hpp"
#include "gpumemprof/detail/stamp_clock.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

GPUMEMPROF_FUNC void EventDelivery::deliver(bool wait, Mutex& device, const ShardRegistry& shards) const {
  if (wait) {
    mutex_.lock();
  } else if (!mutex_.try_lock()) {
    return;  // another delivery runs: it or the next takes these events
  }
  LockGuard delivery(mutex_, adopt_lock);
  // Every event stamped before the cut is in its lane once that lane's lock is taken after it.
  const std::uint64_t cut = stamp_fenced();
  {
    if (wait) {
      device.lock();
    } else if (!device.try_lock()) {
      return;  // a slow path runs: the next delivery
    }
    LockGuard held(device, adopt_lock);
    try {  // allocates only while the lists grow (new streams)
      lanes_.clear();
      shards_.clear();
      lanes_.push_back(&slow_);
      for (const auto& sh : shards.all()) {
        lanes_.push_back(&sh->events);
        shards_.push_back(sh.get());
      }
    } catch (...) {  // no room for the lists: the next delivery
      return;
    }
    slow_.take();
  }
  // Each shard alone, the device mutex let go: a slow path may hold a shard across a backend
  // call and then want the device mutex. Shards live as long as their registry.
  for (Shard* shard : shards_) {
    LockGuard lock(shard->mutex);
    shard->events.take();
  }
  deliver_taken(cut);
}

GPUMEMPROF_FUNC void EventDelivery::take_all(const ShardRegistry& shards, [[maybe_unused]] const Mutex& device,
                                             bool reserve) const {
  slow_.take();
  lanes_.clear();
  lanes_.push_back(&slow_);
  for (const auto& sh : shards.all()) {
    sh->events.take();
    lanes_.push_back(&sh->events);
  }
  if (reserve) {
    for (EventLane* lane : lanes_) lane->reserve();
  }
}

GPUMEMPROF_FUNC void EventDelivery::deliver_taken(std::uint64_t cut) const {
  for (EventLane* lane : lanes_) lane->collect();
  try {
    deliver_events(lanes_, cut, sinks_, runs_);
  } catch (...) {  // no room in the merge scratch (first deliveries only): the next delivery
  }
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
