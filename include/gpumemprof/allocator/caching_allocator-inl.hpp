// Layer 2: CachingAllocator's construction, the exclusive entries of allocate/deallocate, new
// streams' shards, configuration and event sinks (expandable segments:
// expandable_executor.hpp). Included by caching_allocator.hpp; not a header to
// include on its own.
#pragma once

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template <DeviceBackend Backend>
CachingAllocator<Backend>::CachingAllocator(Backend backend, AllocatorConfig config)
    : backend_(std::move(backend)), cfg_(std::move(config)) {
  small_.small = true;
  small_.stat_pool = StatPool::small_pool;
  small_.shards = &shards_;
  large_.small = false;
  large_.stat_pool = StatPool::large_pool;
  large_.shards = &shards_;
  for (std::size_t d : cfg_.roundup_power2_divisions) has_roundup_ = has_roundup_ || d > 1;
  if (cfg_.uses_expandable_segments()) {
    bool vm = false;
    std::size_t page = 0;
    if constexpr (VirtualMemoryBackend<Backend>) {
      vm = true;
      if constexpr (requires { backend_.supports_virtual_memory(); }) vm = backend_.supports_virtual_memory();
      if (vm) page = backend_.granularity();
    }
    if (!vm || page == 0 || (page & (page - 1)) != 0 || page % kMinBlockSize != 0) {
      throw ConfigError(
          "allocator config key 'expandable_segments': True needs a device with virtual memory "
          "mapping, and " +
          backend_.name() + " has none; remove the key or set it to False");
    }
    expandable_ = true;
    compacting_ = cfg_.compacting_expandable_segments;
    // PyTorch maps pages of its segment sizes (kLargeBuffer, kSmallBuffer); the compacting
    // policy maps pages of the device's granularity (expandable_state.hpp).
    executor_.configure(page, compacting_);
  }
  if (cfg_.per_process_memory_fraction) set_memory_fraction(*cfg_.per_process_memory_fraction);
}

template <DeviceBackend Backend>
CachingAllocator<Backend>::~CachingAllocator() {
  try {
    detail::LockGuard lock(device_mutex_);  // no other thread may use a dying allocator
    for (auto& se : cross_stream_.queues()) {
      for (auto& pe : se.queue) backend_.release_event(pe.event);
    }
    for (Segment* s = segment_list_.head(); s != nullptr; s = s->list_next) {
      if (!s->expandable) {
        backend_.free(reinterpret_cast<void*>(s->addr));
        continue;
      }
      if constexpr (VirtualMemoryBackend<Backend>) {
        backend_.synchronize_stream(s->stream);
        // Each run of mapped blocks at once: runs start and end on page boundaries (holes do),
        // while a block may end inside a page, which the driver cannot unmap in part.
        for (const Block* b = s->head; b != nullptr;) {
          if (!b->mapped) {
            b = b->next();
            continue;
          }
          const std::uintptr_t from = b->addr;
          while (b != nullptr && b->mapped) b = b->next();
          const std::uintptr_t to = b != nullptr ? b->addr : s->addr + s->reservation.size;
          backend_.unmap(s->reservation, from - s->addr, to - from);
        }
        backend_.release(s->reservation);
      }
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; the device reclaims at exit
  }
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::record_stream(void* ptr, Stream stream) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  // An allocated block's uses belong to its bucket's lock: deallocate() reads them under it.
  // -1: no such allocation; 0: the block's own stream (same-stream reuse is always safe); 1: a
  // use on another stream.
  auto add_use = [this, addr, stream] {
    auto& bucket = bucket_of(addr);
    detail::LockGuard lock(bucket.lock);
    Block* b = bucket.value.find(addr);
    if (b == nullptr) return -1;
    if (stream == b->stream) return 0;
    if (b->stream_uses == nullptr) b->stream_uses = std::make_unique<std::vector<Stream>>();
    auto& uses = *b->stream_uses;
    if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
    return 1;
  };
  // While a route is active (c10: a capture is under way) the use is also a capture-time use
  // (caching_allocator_pools-inl.hpp says what that changes), noted under the exclusive lock.
  if (pending_events_.load(std::memory_order_relaxed) >= kRouteUnit) {
    ExclusiveLock lock(*this);
    if (pools_.routing()) {
      pools_.reserve_capture_use();  // what may throw, first
      const int added = add_use();
      if (added < 0) throw_invalid_pointer(ptr, "record_stream");
      if (added > 0) pools_.note_capture_use(addr, stream);
      return;
    }
  }
  if (add_use() < 0) invalid_pointer(ptr, "record_stream");
}

template <DeviceBackend Backend>
bool CachingAllocator<Backend>::set_category(void* ptr, std::uint32_t category, bool only_untagged) {
  // Exclusive: the block's free events read its category under its shard, and the sinks must
  // see the change in the allocator's event order.
  ExclusiveLock lock(*this);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Block* b = nullptr;
  {
    auto& bucket = bucket_of(addr);
    detail::LockGuard bucket_lock(bucket.lock);
    b = bucket.value.find(addr);
  }
  if (b == nullptr || b->category == category || (only_untagged && b->category != 0)) return false;
  const std::uint32_t previous = b->category;
  b->category = category;
  delivery_.notify(delivery_.slow_lane(), TraceAction::category_change, b->addr, b->requested, b->stream, b->context,
                   false, category, previous, b->size);
  return true;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::shard_slow(Stream s) {
  detail::LockGuard lock(device_mutex_);
  if (Shard* sh = shards_.find(s); sh != nullptr) return *sh;
  // A new stream. ExclusiveLock takes the device mutex (held here) before the shards, so no
  // exclusive section can miss the new shard's lock.
  return add_shard(s, /*exclusive=*/false);
}

// Adds the shard of new stream `s` (the device mutex held; exclusive: every shard too, and then
// the new one is taken as well), a lane of the ledger before any thread can find it.
template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::add_shard(Stream s, bool exclusive,
                                                                                std::uint32_t pool) {
  auto owned = std::make_unique<Shard>(s, pool);
  shards_.reserve_one();  // what may throw, first
  if (exclusive) {
    ledger_.add_lane_locked(*owned);
  } else {
    ledger_.add_lane(*owned);
  }
  return shards_.add(std::move(owned));
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::allocate_exclusive(Shard& shard, Pool& pool,
                                                                                         Stream stream,
                                                                                         std::size_t size,
                                                                                         std::size_t requested) {
  ExclusiveLock lock(*this);
  // While a capture may be under way, no event is queried (c10 skips process_events then).
  if (events_waiting() != 0 && !pools_.routing()) process_events();
  // A route may send it to a private pool: that pool's shard for the stream.
  const std::uint32_t private_pool = pool_for(stream);
  Shard& target = private_pool == 0 ? shard : add_shard_exclusive(stream, private_pool);
  // Another thread may have freed one. Either way the block is in its tree, and a failure in
  // hand_out leaves it there.
  Block* block = find_free_block(target.trees[pool.small], pool, size);
  if (block == nullptr) block = allocate_slow(target, pool, stream, size, requested, lock);
  detail::StatRecord r;
  // Its shard: the one searched, or (a block borrowed on OOM) its own pool's.
  Shard& owner = block->pool == private_pool ? target : add_shard_exclusive(block->stream, block->pool);
  block = hand_out(owner, pool_of(block), block, size, requested, r);
  ledger_.apply_alloc(r);
  return block;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::deallocate_exclusive(void* ptr) {
  ExclusiveLock lock(*this);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto& bucket = bucket_of(addr);
  Block* b = nullptr;
  {
    detail::LockGuard bucket_lock(bucket.lock);
    b = bucket.value.find(addr);
  }
  if (b == nullptr) throw_invalid_pointer(ptr, "deallocate");
  Pool& pool = pool_of(b);
  // What may throw comes first (events recorded, or room for the free block): a failure leaves
  // the block allocated.
  const bool deferred = b->stream_uses != nullptr && !b->stream_uses->empty();
  if (deferred) {
    if (!defer_while_capturing(b)) insert_events(b);
  } else {
    reserve_free(pool.at(b->stream, b->pool), b);
  }
  {
    detail::LockGuard bucket_lock(bucket.lock);
    bucket.value.erase(addr);
  }
  b->allocated = false;
  ledger_.apply_unallocate(pool.stat_pool, static_cast<std::int64_t>(b->size));
  delivery_.notify_block(delivery_.slow_lane(), TraceAction::free_requested, *b);
  if (deferred) return;
  ledger_.apply_free(
      free_block(pool.at(b->stream, b->pool), block_records_, b, /*deferred=*/false, delivery_.slow_lane()));
  if (b->pool != 0) reclaim_released(b);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::empty_cache() {
  EventCall events(*this, TraceAction::segment_free);
  {
    ExclusiveLock lock(*this);
    release_cached_blocks(&lock);
  }
  debug_validate();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw std::invalid_argument("set_memory_fraction: the fraction must be in [0, 1], got " + std::to_string(fraction));
  }
  const MemInfo info = backend_.mem_get_info();
  ExclusiveLock lock(*this);  // gc_active_ is read under any shard lock
  allowed_max_ = static_cast<std::size_t>(fraction * static_cast<double>(info.total));
  gc_active_ = cfg_.garbage_collection_threshold > 0.0;
}

template <DeviceBackend Backend>
std::size_t CachingAllocator<Backend>::add_event_sink(const AllocatorEventSink& sink) {
  return change_sinks([&] { return delivery_.sinks().add(sink); });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::remove_event_sink(std::size_t slot) {
  change_sinks([&] { delivery_.sinks().remove(slot); });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::replace_event_sink(std::size_t slot, const AllocatorEventSink& sink) {
  change_sinks([&] { delivery_.sinks().replace(slot, sink); });
}

template <DeviceBackend Backend>
std::size_t CachingAllocator<Backend>::event_sink_count() const {
  detail::LockGuard lock(delivery_.lock());
  return delivery_.sinks().count();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::attach_oom_observer(OomObserver observer) {
  detail::LockGuard lock(device_mutex_);
  oom_observers_.push_back(std::move(observer));
}

GPUMEMPROF_NAMESPACE_END
