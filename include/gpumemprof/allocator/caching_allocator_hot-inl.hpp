// Layer 2: CachingAllocator's hot path -- allocate/deallocate of a cached size under one stream's
// shard and one pointer-map bucket, and the block and stat changes they make. Included by
// caching_allocator.hpp; not a header to include on its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

// ------------------------------------------------------------------------------------------------
// Hot path

template <DeviceBackend Backend>
void* CachingAllocator<Backend>::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return nullptr;
  EventCall events(*this, TraceAction::alloc);
  const std::size_t size = round(bytes);
  Pool& pool = is_small_size(size) ? small_ : large_;
  Shard& shard = shard_for(stream);
  Block* block = nullptr;
  std::size_t journal_length = 0;
  {
    shard.yield_to_fold();
    detail::LockGuard lock(shard.mutex);
    if (GPUMEMPROF_LIKELY(pending_events_.load(std::memory_order_relaxed) == 0)) {
      block = find_free_block(shard.trees[pool.small], pool, size);
      Pool* from = &pool;
      if (GPUMEMPROF_UNLIKELY(block == nullptr) && spills_small(pool)) {
        block = executor_.spill_block(&shard.trees[0], size);  // the slow path's choice, without it
        from = &large_;
      }
      if (GPUMEMPROF_LIKELY(block != nullptr)) {  // throws (block still free) or hands it out
        ledger_.reserve(shard);
        detail::StatRecord r;
        block = hand_out(shard, *from, block, size, bytes, r);
        journal_length = ledger_.record(shard, r);
      }
    }
  }
  ledger_.after_record(journal_length);
  if (GPUMEMPROF_UNLIKELY(block == nullptr)) block = allocate_exclusive(shard, pool, stream, size, bytes);
  debug_validate();
  return reinterpret_cast<void*>(block->addr);
}

// Not analysed: the shard is taken and let go in a loop (tried under the bucket, else waited for
// without it), which the analysis cannot follow; every path below unlocks both before leaving.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::deallocate(void* ptr) GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
  if (ptr == nullptr) return;
  EventCall events(*this, TraceAction::free_requested);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto& bucket = bucket_of(addr);
  Shard* shard = nullptr;
  Block* b = nullptr;
  for (;;) {
    bucket.lock.lock();
    b = bucket.value.find(addr);
    // Private pools' blocks, and blocks used on other streams, are freed exclusively.
    if (GPUMEMPROF_UNLIKELY(b == nullptr || b->pool != 0 || (b->stream_uses != nullptr && !b->stream_uses->empty()))) {
      bucket.lock.unlock();
      if (shard != nullptr) shard->mutex.unlock();
      deallocate_exclusive(ptr);  // events on other streams (or an invalid pointer to explain)
      debug_validate();
      return;
    }
    // The shard comes before the bucket in the lock order: try it, else let go and take both.
    const Stream stream = b->stream;
    if (shard != nullptr && shard->stream != stream) {  // the address was freed and reused meanwhile
      shard->mutex.unlock();
      shard = nullptr;
    }
    if (shard == nullptr) {
      Shard* fast = find_fast_shard(stream);
      if (fast == nullptr || !fast->mutex.try_lock()) {
        bucket.lock.unlock();  // never wait (nor take the device mutex) holding a bucket
        shard = fast != nullptr ? fast : &shard_slow(stream);
        shard->yield_to_fold();
        shard->mutex.lock();
        continue;  // look again: another thread may have freed (and reused) the address
      }
      shard = fast;
    }
    try {  // before any change: room for the freed block and its stat record
      reserve_free(shard->trees[b->small_pool], b);
      ledger_.reserve(*shard);
    } catch (...) {
      bucket.lock.unlock();
      shard->mutex.unlock();
      throw;
    }
    bucket.value.erase(addr);
    bucket.lock.unlock();
    break;
  }
  b->allocated = false;
  delivery_.notify_block(shard->events, TraceAction::free_requested, *b);
  const std::size_t journal_length =
      ledger_.record(*shard, free_block(shard->trees[b->small_pool], shard->records, b, false, shard->events));
  shard->mutex.unlock();
  ledger_.after_record(journal_length);
  debug_validate();
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::find_free_block(Tree& tree, Pool& pool,
                                                                                      std::size_t size) {
  if (GPUMEMPROF_UNLIKELY(gc_active_)) pool.free_lookups.fetch_add(1, std::memory_order_relaxed);
  Block* b = tree.lower_bound(size);
  if (b == nullptr) return nullptr;
  if (GPUMEMPROF_UNLIKELY(expandable_ && !compacting_)) b = Executor::best_fit(tree, b);
  const std::size_t max_split = cfg_.max_split_size;
  // An oversize block is never handed to a small request, and a large request only takes a
  // block that wastes less than max_non_split_rounding_size (these blocks are never split).
  if (size < max_split && b->size >= max_split) return nullptr;
  if (size >= max_split && b->size - size >= cfg_.max_non_split_rounding_size) return nullptr;
  return b;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::hand_out(Shard& shard, Pool& pool, Block* block,
                                                                               std::size_t size, std::size_t requested,
                                                                               detail::StatRecord& r) {
  const StatPool sp = pool.stat_pool;
  Tree& tree = shard.trees[pool.small];
  const bool split = should_split(block->size, size, pool.small, cfg_) &&
                     !(GPUMEMPROF_UNLIKELY(block->pool != 0) && block->segment->no_split);
  // What may throw, before any change.
  if (split) {
    shard.records.reserve(1);
    tree.reserve(block->size - size);
  }
  Block* const out = split ? shard.records.get() : block;
  {
    auto& bucket = bucket_of(block->addr);  // the front: the handed-out address either way
    detail::LockGuard lock(bucket.lock);
    try {
      bucket.value.insert(block->addr, out);
    } catch (...) {
      if (split) shard.records.put(out);
      throw;
    }
  }
  // From here on nothing throws.
  tree.erase(block);
  const bool already_split = block->is_split();
  std::int64_t inactive_blocks = 0;  // stat changes, returned in `r`
  std::int64_t inactive_bytes = 0;
  if (split) {
    // The front of the block is handed out; the remainder keeps the old record and stays free.
    Block* rest = block;
    block = out;
    detail::SegmentChain::split_front(rest, block, size);
    pool.insert_free(tree, rest);
    if (!block->segment->expandable) {
      if (already_split) {
        inactive_bytes = -static_cast<std::int64_t>(size);
      } else {
        inactive_bytes = static_cast<std::int64_t>(rest->size);
        inactive_blocks = 1;
      }
    }
  } else if (already_split && !block->segment->expandable) {
    inactive_bytes = -static_cast<std::int64_t>(block->size);
    inactive_blocks = -1;
  }
  block->allocated = true;
  block->requested = requested;
  block->category = detail::thread_memory_category;
  r = detail::StatRecord{};
  r.size = static_cast<std::int64_t>(block->size);
  r.requested = static_cast<std::int64_t>(requested);
  r.inactive_bytes = inactive_bytes;
  r.inactive_blocks = static_cast<std::int32_t>(inactive_blocks);
  r.pool = sp;
  block->context = delivery_.new_context();
  delivery_.notify_block(shard.events, TraceAction::alloc, *block);
  return block;
}

template <DeviceBackend Backend>
detail::StatRecord CachingAllocator<Backend>::free_block(Tree& tree, Records& records, Block* b, bool deferred,
                                                         detail::EventLane& events) {
  delivery_.notify_block(events, TraceAction::free_completed, *b, deferred);
  Pool& pool = pool_of(b);
  detail::StatRecord c;
  c.size = static_cast<std::int64_t>(b->size);
  c.requested = static_cast<std::int64_t>(b->requested);
  c.pool = pool.stat_pool;
  c.is_free = true;
  c.expandable = b->segment->expandable;
  for (Block* neighbour : {b->prev(), b->next()}) {
    if (const std::size_t subsumed = Pool::try_merge(b, neighbour, tree, records); subsumed != 0) {
      c.inactive_blocks -= 1;
      c.inactive_bytes -= static_cast<std::int64_t>(subsumed);
    }
  }
  b->requested = 0;
  b->context = 0;
  b->category = 0;
  pool.insert_free(tree, b);
  if (b->is_split()) {
    c.inactive_blocks += 1;
    c.inactive_bytes += static_cast<std::int64_t>(b->size);
  }
  return c;
}

template <DeviceBackend Backend>
AllocatorGauges CachingAllocator<Backend>::gauges() const noexcept {
  return ledger_.read([](const detail::StatsLedger::State& s) { return gauges_of(s); });
}

template <DeviceBackend Backend>
AllocatorGauges CachingAllocator<Backend>::gauges_of(const detail::StatsLedger::State& s) noexcept {
  const MemoryStats& m = s.stats;
  AllocatorGauges g;
  g.allocated_bytes = m.allocated_bytes[StatPool::all].current;
  g.reserved_bytes = m.reserved_bytes[StatPool::all].current;
  g.active_bytes = m.active_bytes[StatPool::all].current;
  g.inactive_split_bytes = m.inactive_split_bytes[StatPool::all].current;
  g.requested_bytes = m.requested_bytes[StatPool::all].current;
  g.allocations = m.allocation[StatPool::all].current;
  g.total_allocations = s.totals.allocations;
  g.total_frees = s.totals.frees;
  g.total_allocated_bytes = s.totals.allocated_bytes;
  g.total_freed_bytes = s.totals.freed_bytes;
  return g;
}

template <DeviceBackend Backend>
template <class F>
void CachingAllocator<Backend>::visit_segments(F&& f) const {
  with_lock([&f](const LockedView& v) { v.visit_segments(f); });
}

GPUMEMPROF_NAMESPACE_END
