// Layer 2: CachingAllocator's construction, the exclusive entries of allocate/deallocate, new
// streams' shards, configuration and event sinks, and expandable segments. Included by
// caching_allocator.hpp; not a header to include on its own.
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
  if (cfg_.expandable_segments) {
    bool vm = false;
    if constexpr (VirtualMemoryBackend<Backend>) {
      vm = true;
      if constexpr (requires { backend_.supports_virtual_memory(); }) vm = backend_.supports_virtual_memory();
      if (vm) page_ = backend_.granularity();
    }
    if (!vm || page_ == 0 || (page_ & (page_ - 1)) != 0 || page_ % kMinBlockSize != 0) {
      throw ConfigError(
          "allocator config key 'expandable_segments': True needs a device with virtual memory "
          "mapping, and " +
          backend_.name() + " has none; remove the key or set it to False");
    }
    expandable_ = true;
  }
  if (cfg_.per_process_memory_fraction) set_memory_fraction(*cfg_.per_process_memory_fraction);
}

template <DeviceBackend Backend>
CachingAllocator<Backend>::~CachingAllocator() {
  try {
    detail::LockGuard lock(device_mutex_);  // no other thread may use a dying allocator
    for (auto& se : events_) {
      for (auto& pe : se.queue) backend_.release_event(pe.event);
    }
    for (Segment* s = segments_head_; s != nullptr; s = s->list_next) {
      if (!s->expandable) {
        backend_.free(reinterpret_cast<void*>(s->addr));
        continue;
      }
      if constexpr (VirtualMemoryBackend<Backend>) {
        backend_.synchronize_stream(s->stream);
        for (const Block* b = s->head; b != nullptr; b = b->next) {
          if (b->mapped) backend_.unmap(s->reservation, b->addr - s->addr, b->size);
        }
        backend_.release(s->reservation);
      }
    }
    if constexpr (VirtualMemoryBackend<Backend>) {
      if (expandable_) backend_.release_spare_pages();
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; the device reclaims at exit
  }
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::record_stream(void* ptr, Stream stream) {
  // An allocated block's uses belong to its bucket's lock: deallocate() reads them under it.
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  {
    auto& bucket = bucket_of(addr);
    detail::LockGuard lock(bucket.lock);
    if (Block* b = bucket.value.find(addr); b != nullptr) {
      if (stream == b->stream) return;  // same-stream reuse is always safe
      if (b->stream_uses == nullptr) b->stream_uses = std::make_unique<std::vector<Stream>>();
      auto& uses = *b->stream_uses;
      if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
      return;
    }
  }
  invalid_pointer(ptr, "record_stream");
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::shard_slow(Stream s) {
  detail::LockGuard lock(device_mutex_);
  for (const auto& sh : shards_) {
    if (sh->stream == s) return *sh;
  }
  // A new stream. ExclusiveLock takes the device mutex (held here) before the shards, so no
  // exclusive section can miss the new shard's lock.
  return add_shard(s, /*exclusive=*/false);
}

// Adds the shard of new stream `s` (the device mutex held; exclusive: every shard too, and then
// the new one is taken as well), a lane of the ledger before any thread can find it.
template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::add_shard(Stream s, bool exclusive) {
  auto owned = std::make_unique<Shard>(s);
  shards_.reserve(shards_.size() + 1);  // what may throw, first
  if (exclusive) {
    ledger_.add_lane_locked(*owned);
  } else {
    ledger_.add_lane(*owned);
  }
  Shard* sh = shards_.emplace_back(std::move(owned)).get();
  if (const std::size_t n = fast_count_.load(std::memory_order_relaxed); n < kFastShards) {
    fast_shards_[n].store(sh, std::memory_order_relaxed);
    fast_streams_[n].store(s.id, std::memory_order_relaxed);
    fast_count_.store(n + 1, std::memory_order_release);
  }
  return *sh;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::allocate_exclusive(Shard& shard, Pool& pool,
                                                                                         Stream stream,
                                                                                         std::size_t size,
                                                                                         std::size_t requested) {
  ExclusiveLock lock(*this);
  if (pending_events_.load(std::memory_order_relaxed) != 0) process_events();
  // Another thread may have freed one. Either way the block is in its tree, and a failure in
  // hand_out leaves it there.
  Block* block = find_free_block(shard.trees[pool.small], pool, size);
  if (block == nullptr) block = allocate_slow(shard, pool, stream, size, requested, lock);
  detail::StatRecord r;
  block = hand_out(shard, pool_of(block), block, size, requested, r);
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
    insert_events(b);
  } else {
    reserve_free(pool.at(b->stream), b);
  }
  {
    detail::LockGuard bucket_lock(bucket.lock);
    bucket.value.erase(addr);
  }
  b->allocated = false;
  ledger_.apply_unallocate(pool.stat_pool, static_cast<std::int64_t>(b->size));
  notify_block(TraceAction::free_requested, *b);
  if (!deferred) ledger_.apply_free(free_block(pool.at(b->stream), block_records_, b, /*deferred=*/false));
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::empty_cache() {
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
  ExclusiveLock lock(*this);  // sinks are called under any shard lock
  return sinks_.add(sink);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::remove_event_sink(std::size_t slot) {
  ExclusiveLock lock(*this);
  sinks_.remove(slot);
}

template <DeviceBackend Backend>
std::size_t CachingAllocator<Backend>::event_sink_count() const {
  ExclusiveLock lock(*this);
  return sinks_.count();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::attach_oom_observer(OomObserver observer) {
  detail::LockGuard lock(device_mutex_);
  oom_observers_.push_back(std::move(observer));
}

// ------------------------------------------------------------------------------------------------
// Expandable segments. Invariants (validate()): an expandable segment's blocks tile its whole
// reservation; holes (unmapped blocks) start and end on page boundaries, are free, in no tree,
// and never neighbour another hole; Segment::size is its mapped bytes.

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::grow_expandable(Pool& pool, Stream stream,
                                                                                      std::size_t size, bool is_retry) {
  if (is_retry) ++stats_.num_alloc_retries;
  // A small request that would move a page (its one page) takes a free block of the large pool
  // instead: the pools have reservations of their own, so the page would be unmapped there and
  // mapped here, and moved back once the large pool wants it again (gpt2_generate's small and
  // large requests take turns as its sequences grow: 49 pages moved per replay, none with this).
  if (pool.small && pages_to_recycle(size, page_) != 0) {
    if (Block* b = take_spill(stream, size); b != nullptr) return b;
  }
  Block* start = find_expandable_run(pool, stream, size);
  if (start == nullptr) {
    start = new_reservation(pool, stream);
    if (start == nullptr || start->size < size) return nullptr;  // no address space, or beyond the device
  }
  Segment* seg = start->segment;
  const std::uintptr_t begin = start->addr;
  const std::uintptr_t page_end = (begin + size + page_ - 1) & ~(page_ - 1);
  std::size_t need = 0;  // bytes of holes to map: those in [begin, begin + size), to a page boundary
  for (const Block* b = start; b != nullptr && b->addr < begin + size; b = b->next) {
    if (!b->mapped) need += std::min(b->addr + b->size, page_end) - b->addr;
  }
  // Pages wholly inside free blocks elsewhere are recycled only for what would take reserved above
  // the fragmentation budget: moving a page costs a stream synchronization, an unmap and a map
  // (~50-70 us of host time on an H100), and a little room lets a repeated step's blocks land
  // where they were last time instead of pulling pages across the reservation on every step.
  recycle_pages(pages_to_recycle(size, need), begin, begin + size);
  auto fail = [&]() -> Block* {  // a reservation made for nothing goes back at once
    if (seg->head->next == nullptr && !seg->head->mapped) release_reservation(seg);
    if constexpr (VirtualMemoryBackend<Backend>) backend_.release_spare_pages();
    return nullptr;
  };
  if (allowed_max_ && total_reserved_ + need > *allowed_max_) return fail();
  Block* cur = seg->head;  // recycling may have merged `start` into a larger hole: find it again
  while (cur->addr + cur->size <= begin) cur = cur->next;
  if (!cur->mapped) {
    cur = map_block(cur, std::min((size + page_ - 1) & ~(page_ - 1), cur->size));
    if (cur == nullptr) return fail();
  }
  while (cur->size < size) {  // [free mapped][hole]...: map the next hole's front and merge
    Block* hole = cur->next;
    cur = map_block(hole, std::min((size - cur->size + page_ - 1) & ~(page_ - 1), hole->size));
    if (cur == nullptr) return fail();
  }
  if constexpr (VirtualMemoryBackend<Backend>) backend_.release_spare_pages();  // recycled pages were used
  // Free, in its tree: hand_out takes it.
  return cur;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::take_spill(Stream stream, std::size_t size) {
  // Best fit among the stream's free large blocks; none with max_split_size set (its oversize
  // blocks are never split for small requests).
  if (cfg_.max_split_size != AllocatorConfig::unlimited) return nullptr;
  Tree* tree = large_.find(stream);
  if (tree == nullptr) return nullptr;
  return tree->lower_bound(size);  // stays in its tree: hand_out takes it
}

template <DeviceBackend Backend>
std::size_t CachingAllocator<Backend>::pages_to_recycle(std::size_t size, std::size_t need) {
  // The budget: kExpandableSlack of the most bytes ever live (a running high-water mark that
  // reset_peak_memory_stats does not lower), within the device's free memory and the memory fraction.
  const Stat& live = stats_.allocated_bytes[StatPool::all];
  live_high_ =
      std::max({live_high_, static_cast<std::size_t>(live.peak), static_cast<std::size_t>(live.current) + size});
  std::size_t budget = live_high_ + static_cast<std::size_t>(static_cast<double>(live_high_) * kExpandableSlack);
  if (total_reserved_ + need <= budget) {  // about to take fresh memory: only what the device has
    if constexpr (VirtualMemoryBackend<Backend>)
      budget = std::min(budget, total_reserved_ + backend_.mem_get_info().free);
    if (allowed_max_) budget = std::min(budget, *allowed_max_);
  }
  const std::size_t over = total_reserved_ + need > budget ? total_reserved_ + need - budget : 0;
  return std::min(need, (over + page_ - 1) & ~(page_ - 1));
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::find_expandable_run(const Pool& pool,
                                                                                          Stream stream,
                                                                                          std::size_t size) const {
  // Among the runs of free blocks (mapped or holes) of this pool and stream, the place that
  // holds `size` bytes with the fewest hole bytes to map (the first found on ties): every page mapped
  // here is a page recycled elsewhere once reserved is at its peak. Runs alternate free-mapped
  // and hole, as both kinds merge; a place starts at a run's first block or at a mapped one
  // (starting at a hole behind a free mapped block would merge with it anyway).
  Block* best = nullptr;
  std::size_t best_need = 0;
  for (const Segment* s = segments_head_; s != nullptr; s = s->list_next) {
    if (!s->expandable || s->stream != stream || s->small_pool != pool.small) continue;
    for (Block* start = s->head; start != nullptr; start = start->next) {
      if (!start->is_free() || (!start->mapped && start->prev != nullptr && start->prev->is_free())) continue;
      const std::uintptr_t end = start->addr + size;
      const std::uintptr_t page_end = (end + page_ - 1) & ~(page_ - 1);
      std::size_t need = 0;
      const Block* b = start;
      for (; b != nullptr && b->is_free() && b->addr < end; b = b->next) {
        if (!b->mapped) need += std::min(b->addr + b->size, page_end) - b->addr;
        if (best != nullptr && need >= best_need) break;  // cannot win: stop scanning
      }
      const bool holds = b == nullptr ? s->addr + s->reservation.size >= end : b->addr >= end;
      if (holds && need > 0 && (best == nullptr || need < best_need)) {
        best = start;
        best_need = need;
      }
    }
  }
  return best;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::new_reservation(Pool& pool, Stream stream) {
  if constexpr (VirtualMemoryBackend<Backend>) {
    // 9/8 of the device, as PyTorch reserves: room to grow even after holes were punched.
    const std::size_t total = backend_.mem_get_info().total;
    const std::size_t bytes = (total + total / 8 + page_ - 1) & ~(page_ - 1);
    Segment* s = segment_records_.get();
    Block* b = nullptr;
    try {
      b = block_records_.get();
    } catch (...) {
      segment_records_.put(s);
      throw;
    }
    const Reservation r = backend_.reserve(bytes);
    if (r.size == 0) {
      block_records_.put(b);
      segment_records_.put(s);
      return nullptr;
    }
    s->addr = r.base;
    s->size = 0;
    s->stream = stream;
    s->small_pool = pool.small;
    s->expandable = true;
    s->reservation = r;
    s->head = b;
    link_segment(s);
    b->addr = r.base;
    b->size = r.size;
    b->stream = stream;
    b->segment = s;
    b->small_pool = pool.small;
    b->mapped = false;
    return b;
  } else {
    (void)pool;
    (void)stream;
    return nullptr;
  }
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::map_block(Block* hole, std::size_t bytes) {
  Segment* s = hole->segment;
  // First: nothing throws once mapped. The mapped block merges with free mapped neighbours.
  std::size_t merged = bytes;
  for (const Block* n : {hole->prev, bytes < hole->size ? nullptr : hole->next}) {
    if (n != nullptr && n->is_free() && n->mapped) merged += n->size;
  }
  pool_of(hole).at(hole->stream).reserve(merged);
  Block* rest = bytes < hole->size ? block_records_.get() : nullptr;
  bool ok = false;
  if constexpr (VirtualMemoryBackend<Backend>) ok = backend_.map(s->reservation, hole->addr - s->addr, bytes);
  if (!ok) {
    if (rest != nullptr) block_records_.put(rest);
    return nullptr;
  }
  if (rest != nullptr) {  // hole -> rest (still a hole) -> next
    rest->addr = hole->addr + bytes;
    rest->size = hole->size - bytes;
    rest->stream = hole->stream;
    rest->segment = s;
    rest->small_pool = hole->small_pool;
    rest->mapped = false;
    rest->prev = hole;
    rest->next = hole->next;
    if (rest->next != nullptr) rest->next->prev = rest;
    hole->next = rest;
    hole->size = bytes;
  }
  hole->mapped = true;
  Pool& pool = pool_of(hole);
  s->size += bytes;
  total_reserved_ += bytes;
  stat_add(stats_.reserved_bytes, pool.stat_pool, static_cast<std::int64_t>(bytes));
  ++stats_.num_device_alloc;  // PyTorch counts each map as a device allocation
  const std::uint64_t context = notify(TraceAction::segment_map, hole->addr, bytes, hole->stream);
  if (s->context == 0) s->context = context;
  try_merge(hole, hole->prev, pool);
  try_merge(hole, hole->next, pool);
  insert_free(pool, hole);
  return hole;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::unmap_pages(Block* b, std::uintptr_t addr, std::size_t bytes) {
  Segment* s = b->segment;
  Pool& pool = pool_of(b);
  const bool has_before = addr > b->addr;
  const bool has_after = addr + bytes < b->addr + b->size;
  Tree& tree = *pool.find(b->stream);
  if (has_before) tree.reserve(addr - b->addr);  // first: nothing throws once unmapped
  if (has_after) tree.reserve(b->addr + b->size - addr - bytes);
  Block* before = has_before ? block_records_.get() : nullptr;
  Block* after = nullptr;
  try {
    if (has_after) after = block_records_.get();
    if constexpr (VirtualMemoryBackend<Backend>) backend_.unmap(s->reservation, addr - s->addr, bytes);
  } catch (...) {
    if (before != nullptr) block_records_.put(before);
    if (after != nullptr) block_records_.put(after);
    throw;
  }
  pool.find(b->stream)->erase(b);
  auto piece = [&](Block* p, std::uintptr_t at, std::size_t n) {
    p->addr = at;
    p->size = n;
    p->stream = b->stream;
    p->segment = s;
    p->small_pool = b->small_pool;
  };
  if (before != nullptr) {  // prev -> before (free, mapped) -> b
    piece(before, b->addr, addr - b->addr);
    before->prev = b->prev;
    before->next = b;
    (b->prev != nullptr ? b->prev->next : s->head) = before;
    b->prev = before;
    insert_free(pool, before);
  }
  if (after != nullptr) {  // b -> after (free, mapped) -> next
    piece(after, addr + bytes, b->addr + b->size - (addr + bytes));
    after->prev = b;
    after->next = b->next;
    if (after->next != nullptr) after->next->prev = after;
    b->next = after;
    insert_free(pool, after);
  }
  b->addr = addr;
  b->size = bytes;
  b->mapped = false;
  s->size -= bytes;
  total_reserved_ -= bytes;
  stat_sub(stats_.reserved_bytes, pool.stat_pool, static_cast<std::int64_t>(bytes));
  ++stats_.num_device_free;
  notify(TraceAction::segment_unmap, addr, bytes, b->stream, s->context);
  try_merge(b, b->prev, pool);  // holes merge with holes only
  try_merge(b, b->next, pool);
}

template <DeviceBackend Backend>
std::size_t CachingAllocator<Backend>::recycle_pages(std::size_t wanted, std::uintptr_t keep_begin,
                                                     std::uintptr_t keep_end) {
  if (wanted == 0) return 0;
  struct Candidate {
    Block* block;
    std::uintptr_t lo, hi;  // its whole pages
    bool beside;            // the block the growth ends in: its pages are taken last
  };
  std::vector<Candidate> candidates;
  for (Segment* s = segments_head_; s != nullptr; s = s->list_next) {
    if (!s->expandable) continue;
    for (Block* b = s->head; b != nullptr; b = b->next) {
      if (!b->mapped || !b->is_free()) continue;
      std::uintptr_t lo = (b->addr + page_ - 1) & ~(page_ - 1);
      const std::uintptr_t hi = (b->addr + b->size) & ~(page_ - 1);
      const bool beside = b->addr < keep_end && keep_begin < b->addr + b->size;
      if (beside) {
        // A free block the growth ends in: its pages above the growth can go too (kept whole, such
        // a block let reserved pass the budget: gpt2_train 7864 -> 7876 MiB after 11 warm
        // replays), last, as the next growth here would want them back.
        if (b->addr < keep_begin) continue;
        lo = std::max(lo, (keep_end + page_ - 1) & ~(page_ - 1));
      }
      if (hi > lo) candidates.push_back({b, lo, hi, beside});
    }
  }
  // Largest first: the fewest unmap calls.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    return x.beside != y.beside ? y.beside : x.hi - x.lo > y.hi - y.lo;
  });
  std::vector<Stream> synced;
  std::size_t got = 0;
  for (const Candidate& c : candidates) {
    if (got >= wanted) break;
    const std::size_t take = std::min(c.hi - c.lo, wanted - got);
    if (std::find(synced.begin(), synced.end(), c.block->stream) == synced.end()) {
      if constexpr (VirtualMemoryBackend<Backend>) backend_.synchronize_stream(c.block->stream);
      synced.push_back(c.block->stream);
    }
    unmap_pages(c.block, c.hi - take, take);  // the top pages: the block's front stays put
    got += take;
  }
  return got;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_expandable() {
  for (Segment* s = segments_head_; s != nullptr;) {
    Segment* next = s->list_next;
    if (s->expandable) release_expandable_segment(s, /*synced=*/false);
    s = next;
  }
  if constexpr (VirtualMemoryBackend<Backend>) backend_.release_spare_pages();
}

// Unmaps every free page of expandable segment `s` (synchronizing its stream first, unless
// `synced`), and gives back its reservation once nothing is mapped.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_expandable_segment(Segment* s, bool synced) {
  std::vector<Block*> free_mapped;
  for (Block* b = s->head; b != nullptr; b = b->next) {
    if (b->mapped && b->is_free()) free_mapped.push_back(b);
  }
  for (Block* b : free_mapped) {
    const std::uintptr_t lo = (b->addr + page_ - 1) & ~(page_ - 1);
    const std::uintptr_t hi = (b->addr + b->size) & ~(page_ - 1);
    if (hi <= lo) continue;
    if (!synced) {
      if constexpr (VirtualMemoryBackend<Backend>) backend_.synchronize_stream(s->stream);
      synced = true;
    }
    unmap_pages(b, lo, hi - lo);
  }
  if (s->head->next == nullptr && !s->head->mapped) release_reservation(s);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_reservation(Segment* s) {
  if constexpr (VirtualMemoryBackend<Backend>) backend_.release(s->reservation);
  unlink_segment(s);
  block_records_.put(s->head);
  segment_records_.put(s);
}

GPUMEMPROF_NAMESPACE_END
