// Layer 2: CachingAllocator's changes of its sink set, between two deliveries of buffered events
// (the delivery itself: event_delivery.hpp). Included by caching_allocator.hpp; not a header to
// include on its own.
#pragma once

#include <cstdint>
#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template <DeviceBackend Backend>
template <class F>
decltype(auto) CachingAllocator<Backend>::change_sinks(F&& change) {
  detail::LockGuard delivery(delivery_.lock());
  {
    ExclusiveLock lock(*this, typename ExclusiveLock::ReadersOnly{});
    delivery_.take_all(shards_, device_mutex_);
  }
  delivery_.deliver_taken(std::numeric_limits<std::uint64_t>::max());  // to the sinks they happened under
  auto set_active = [this]() GPUMEMPROF_REQUIRES(delivery_.lock()) {
    ExclusiveLock lock(*this, typename ExclusiveLock::ReadersOnly{});
    const bool any = delivery_.sinks().count() != 0;
    delivery_.take_all(shards_, device_mutex_, /*reserve=*/any);  // may throw: stays inactive
    delivery_.sinks().set_active(any);
  };
  if constexpr (std::is_void_v<decltype(change())>) {
    change();
    set_active();
    delivery_.deliver_taken(std::numeric_limits<std::uint64_t>::max());
  } else {
    auto result = change();
    set_active();
    delivery_.deliver_taken(std::numeric_limits<std::uint64_t>::max());
    return result;
  }
}

GPUMEMPROF_NAMESPACE_END
