// Layer 2: CachingAllocator's segment lifecycle -- PyTorch's malloc sequence (new segments, the
// OOM retries), giving segments back (empty_cache, garbage collection), cross-stream frees and
// streams about to be destroyed. Included by caching_allocator.hpp; not a header to include on
// its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

// ------------------------------------------------------------------------------------------------
// Getting memory when no cached block fits: PyTorch's malloc sequence.

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::allocate_slow(Shard& shard, Pool& pool,
                                                                                    Stream stream, std::size_t size,
                                                                                    std::size_t requested,
                                                                                    ExclusiveLock& lock) {
  if (gc_active_) garbage_collect_cached_blocks();
  if (expandable_ && shard.pool == 0) {  // private pools never use expandable segments (as c10)
    // Reserving and mapping may synchronize: relaxed, for captures in global mode elsewhere.
    Block* b = nullptr;
    {
      RelaxedCapture relaxed(backend_);
      b = executor_.grow(pool, stream, size, false);
    }
    if (b == nullptr) {  // unmap every free page (after waiting for all streams) and try once more
      release_cached_blocks();
      RelaxedCapture relaxed(backend_);
      b = executor_.grow(pool, stream, size, true);
    }
    if (b == nullptr) b = borrow_on_oom(pool, stream, size);
    if (b == nullptr) throw_oom(pool, stream, size, requested, lock);
    return b;
  }
  // new_segment lets go of locks across the backend's malloc: each step below reads the state
  // afresh, with every lock held again (PyTorch's malloc warns of the same around alloc_block).
  const std::size_t segment_bytes = segment_size_for(size);
  Block* b = new_segment(shard, pool, segment_bytes, false, lock);
  // Free just enough oversize cached blocks, then try again.
  if (b == nullptr && release_available_cached_blocks(pool, stream, shard.pool, size)) {
    b = new_segment(shard, pool, segment_bytes, false, lock);
  }
  // Wait for every stream, return every fully free segment, and try one last time -- unless a
  // capture may be under way (waiting is what it forbids).
  if (b == nullptr && !capturing(stream)) {
    release_cached_blocks(&lock);
    b = new_segment(shard, pool, segment_bytes, true, lock);
  }
  // The default pool's last resort: a cached block of a use_on_oom pool.
  if (b == nullptr && shard.pool == 0) b = borrow_on_oom(pool, stream, size);
  if (b == nullptr) throw_oom(pool, stream, size, requested, lock);
  return b;
}

// PyTorch (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::alloc_block) unlocks its
// one mutex around cudaMalloc only with CUDAAllocatorConfig::release_lock_on_cudamalloc() (default
// false) and locks it again at scope exit; malloc() warns that state read before alloc_block may
// change across it. Its memory-fraction check comes before the unlock, so two threads may both
// pass it: here mallocs in flight count (reserving_). cudaFree (release_block: emptyCache, the OOM
// sequence, garbage collection) and the expandable map/unmap calls always run under its mutex.
template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::new_segment(Shard& shard, Pool& pool,
                                                                                  std::size_t segment_bytes,
                                                                                  bool is_retry, ExclusiveLock& lock) {
  const Stream stream = shard.stream;
  if (is_retry) ++stats_.num_alloc_retries;
  // Mallocs in flight count: with release_lock_on_cudamalloc two threads may be in one at once.
  if (allowed_max_ && total_reserved_ + reserving_ + segment_bytes > *allowed_max_) return nullptr;
  // Take the records and the tree's room first: once the device memory is ours, nothing may throw.
  shard.trees[pool.small].reserve(segment_bytes);
  Segment* s = segment_list_.make();
  Block* b = nullptr;
  void* p = nullptr;
  reserving_ += segment_bytes;
  try {
    b = block_records_.get();
    // The device's malloc may take milliseconds: other streams' hot paths go on meanwhile, and
    // with release_lock_on_cudamalloc everything does (see the top of caching_allocator.hpp).
    const bool keep = !cfg_.release_lock_on_cudamalloc;
    p = lock.released_during(keep, keep ? &shard : nullptr, [&] {
      RelaxedCapture relaxed(backend_);
      return backend_.malloc(segment_bytes);
    });
  } catch (...) {
    reserving_ -= segment_bytes;
    if (b != nullptr) block_records_.put(b);
    segment_list_.recycle(s);
    throw;
  }
  reserving_ -= segment_bytes;
  if (p == nullptr) {
    block_records_.put(b);
    segment_list_.recycle(s);
    return nullptr;
  }
  s->addr = reinterpret_cast<std::uintptr_t>(p);
  s->size = segment_bytes;
  s->stream = stream;
  s->small_pool = pool.small;
  s->pool = shard.pool;
  if (shard.pool != 0) {
    s->no_split = pools_.at(shard.pool).options.no_split;
    s->pool_id[0] = pools_.at(shard.pool).id.first;
    s->pool_id[1] = pools_.at(shard.pool).id.second;
    ++pools_.at(shard.pool).segments;
  }
  detail::SegmentChain::start(*s, b, segment_bytes, /*mapped=*/true);
  segment_list_.link(s);
  total_reserved_ += segment_bytes;
  stats_.segment.increase(pool.stat_pool, 1);
  stats_.reserved_bytes.increase(pool.stat_pool, static_cast<std::int64_t>(segment_bytes));
  if (segment_bytes >= cfg_.max_split_size) stats_.oversize_segments.increase(1);
  ++stats_.num_device_alloc;
  s->context = delivery_.new_context();
  delivery_.notify(delivery_.slow_lane(), TraceAction::segment_alloc, s->addr, segment_bytes, stream, s->context);
  pool.insert_free(shard.trees[pool.small], b);  // free until hand_out takes it
  return b;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_segment(Block* whole) {
  Segment* s = whole->segment;
  Pool& pool = pool_of(whole);
  {
    RelaxedCapture relaxed(backend_);
    backend_.free(reinterpret_cast<void*>(s->addr));  // first: if it throws, nothing changed
  }
  pool.find(s->stream, s->pool)->erase(whole);
  forget_segment(whole);
}

// The bookkeeping of a segment given back to the device, its whole block already out of its tree.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::forget_segment(Block* whole) {
  Segment* s = whole->segment;
  Pool& pool = pool_of(whole);
  delivery_.notify(delivery_.slow_lane(), TraceAction::segment_free, s->addr, s->size, s->stream, s->context);
  total_reserved_ -= s->size;
  stats_.segment.decrease(pool.stat_pool, 1);
  stats_.reserved_bytes.decrease(pool.stat_pool, static_cast<std::int64_t>(s->size));
  if (s->size >= cfg_.max_split_size) stats_.oversize_segments.decrease(1);
  ++stats_.num_device_free;
  segment_list_.unlink(s);
  if (const std::uint32_t p = s->pool; p != 0) {
    --pools_.at(p).segments;
    pools_.forget_if_unused(p);
  }
  block_records_.put(detail::SegmentChain::finish(*s));
  segment_list_.recycle(s);
}

template <DeviceBackend Backend>
bool CachingAllocator<Backend>::release_available_cached_blocks(Pool& pool, Stream stream, std::uint32_t private_pool,
                                                                std::size_t size) {
  const std::size_t max_split = cfg_.max_split_size;
  if (max_split == AllocatorConfig::unlimited || (expandable_ && private_pool == 0)) return false;
  Tree* tree = pool.find(stream, private_pool);
  if (tree == nullptr) return false;
  const std::size_t key = std::max(size, max_split);
  if (Block* b = tree->lower_bound(key); b != nullptr) {
    if (b->is_split()) return false;  // oversize blocks are whole segments; be defensive
    release_segment(b);
    return true;
  }
  // No single block is large enough: release oversize blocks, largest first.
  std::size_t released = 0;
  for (Block* cur = tree->last(); cur != nullptr && released < key && cur->size >= max_split;) {
    Block* smaller = tree->prev(cur);
    if (!cur->is_split()) {
      released += cur->size;
      release_segment(cur);
    }
    cur = smaller;
  }
  return released >= key;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_cached_blocks(ExclusiveLock* lock) {
  if (any_capturing()) return;  // c10 never empties its cache during capture
  synchronize_and_free_events();
  release_cached_segments(large_, lock);
  release_cached_segments(small_, lock);
  if (expandable_) executor_.release_all();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_cached_segments(Pool& pool, ExclusiveLock* lock) {
  // The default pool's whole free segments, and those of private pools no one uses any more.
  std::vector<Block*> whole;
  std::vector<bool> held(pools_.size());
  for (std::uint32_t p = 0; p < held.size(); ++p) held[p] = pools_.held(p);
  pool.for_each_pool_tree([&whole, &held](std::uint32_t p, Stream, Tree& tree) {
    if (held[p]) return;
    for (Block* b = tree.first(); b != nullptr; b = tree.next(b)) {
      if (!b->is_split() && !b->segment->expandable) whole.push_back(b);
    }
  });
  if (lock == nullptr) {
    for (Block* b : whole) release_segment(b);
    return;
  }
  // cudaFree synchronizes the device: each runs holding only the device mutex, so other threads'
  // hot paths go on. The blocks leave their trees first, so that none is taken meanwhile; the
  // backend's calls and the events and stats that follow each are as in release_segment.
  for (Block* b : whole) pool.at(b->stream, b->pool).erase(b);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    try {
      lock->released_during(true, nullptr, [&] { backend_.free(reinterpret_cast<void*>(whole[i]->segment->addr)); });
    } catch (...) {  // the rest stay cached, as release_segment leaves them
      for (std::size_t j = i; j < whole.size(); ++j) pool.insert_free(whole[j]);
      throw;
    }
    forget_segment(whole[i]);
  }
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::garbage_collect_cached_blocks() {
  // Release free whole segments that have waited longest (counted in free-block lookups),
  // until reserved memory is back under the threshold -- without synchronizing.
  const auto threshold =
      static_cast<std::size_t>(cfg_.garbage_collection_threshold * static_cast<double>(*allowed_max_));
  if (total_reserved_ <= threshold) return;
  const std::size_t target = total_reserved_ - threshold;
  std::vector<Block*> candidates;
  large_.for_each_tree([&candidates](Stream, Tree& tree) {
    for (Block* b = tree.first(); b != nullptr; b = tree.next(b)) {
      if (!b->is_split() && !b->segment->expandable) candidates.push_back(b);
    }
  });
  auto age = [this](const Block* b) { return large_.free_lookups - b->gc_base; };
  std::uint64_t total_age = 0;
  for (const Block* b : candidates) total_age += age(b);
  std::size_t count = candidates.size();
  std::size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && count > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(count);
    freed = false;
    for (Block*& b : candidates) {
      if (b == nullptr || static_cast<double>(age(b)) < age_threshold) continue;
      freed = true;
      reclaimed += b->size;
      total_age -= age(b);
      --count;
      release_segment(b);
      b = nullptr;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Cross-stream frees.

template <DeviceBackend Backend>
void CachingAllocator<Backend>::insert_events(Block* b) {
  const std::vector<Stream>& uses = *b->stream_uses;
  std::size_t done = 0;
  try {
    for (; done < uses.size(); ++done) {
      const Stream s = uses[done];
      std::deque<PendingEvent>& queue = cross_stream_.queue_of(s);
      const Event e = backend_.record_event(s);
      try {
        queue.push_back({e, b});
      } catch (...) {
        backend_.release_event(e);
        throw;
      }
      ++b->event_count;
      ++pending_events_;
    }
  } catch (...) {  // take back the events recorded so far (each the last of its queue): no change
    for (std::size_t i = done; i-- > 0;) {
      auto& q = cross_stream_.find(uses[i])->queue;
      backend_.release_event(q.back().event);
      q.pop_back();
      --b->event_count;
      --pending_events_;
    }
    throw;
  }
  b->stream_uses.reset();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::process_events() {
  if (!cross_stream_.deferred().empty()) flush_deferred();
  // Per stream, in recording order, stop at the first event not yet complete; a stream that
  // captures now is left alone (its events wait for the capture to end).
  auto& queues = cross_stream_.queues();
  for (auto it = queues.begin(); it != queues.end();) {
    auto& q = it->queue;
    if (!q.empty() && capturing(it->stream)) {
      ++it;
      continue;
    }
    while (!q.empty()) {
      const PendingEvent pe = q.front();
      if (!backend_.query_event(pe.event)) break;
      if (pe.block->event_count == 1) reserve_free(pool_of(pe.block).at(pe.block->stream, pe.block->pool), pe.block);
      backend_.release_event(pe.event);
      q.pop_front();
      --pending_events_;
      if (--pe.block->event_count == 0) free_block_exclusive(pe.block);
    }
    it = q.empty() ? queues.erase(it) : std::next(it);
  }
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::synchronize_and_free_events() {
  ++stats_.num_sync_all_streams;
  if (!cross_stream_.deferred().empty()) flush_deferred();
  auto& queues = cross_stream_.queues();
  while (!queues.empty()) {
    synchronize_queue(queues.front().queue);
    queues.erase(queues.begin());
  }
}

// Waits for each event of one stream's queue and frees the blocks that waited for it last.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::synchronize_queue(std::deque<PendingEvent>& q) {
  while (!q.empty()) {
    const PendingEvent pe = q.front();
    backend_.synchronize_event(pe.event);
    if (pe.block->event_count == 1) reserve_free(pool_of(pe.block).at(pe.block->stream, pe.block->pool), pe.block);
    backend_.release_event(pe.event);
    q.pop_front();
    --pending_events_;
    if (--pe.block->event_count == 0) free_block_exclusive(pe.block);
  }
}

// ------------------------------------------------------------------------------------------------
// A stream about to be destroyed (release_stream): afterwards nothing refers to its handle.

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_stream(Stream stream) {
  if (stream == Stream{}) {
    throw std::invalid_argument("release_stream: the default stream is never destroyed; pass a stream you created");
  }
  EventCall events(*this, TraceAction::segment_free);
  {
    ExclusiveLock lock(*this);
    // 1. Its work so far completes (an event on it, waited for): what it used is free to reuse.
    const Event done = backend_.record_event(stream);
    backend_.synchronize_event(done);
    backend_.release_event(done);
    // 2. Its pending events complete; the blocks that waited for them are freed.
    if (StreamEvents* q = cross_stream_.find(stream); q != nullptr) {
      synchronize_queue(q->queue);
      cross_stream_.erase(stream);
    }
    // 3. Live blocks of other streams forget their uses on it (that work is done).
    pools_.forget_capture_stream(stream);
    for (Segment* s = segment_list_.head(); s != nullptr; s = s->list_next) {
      for (Block* b = s->head; b != nullptr; b = b->next()) {
        if (b->stream_uses == nullptr) continue;
        auto& uses = *b->stream_uses;
        uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
      }
    }
    // 4. Its cached memory goes back to the device: whole free segments, free expandable pages.
    // 5. Its segments that still hold allocated or pending blocks move to the default stream,
    //    free blocks included, so later frees, reuse and page moves never name the handle again
    //    and a new stream with the same handle starts with nothing.
    for (Segment* s = segment_list_.head(); s != nullptr;) {
      Segment* next = s->list_next;
      if (s->stream == stream) {
        if (s->expandable) {
          executor_.release_segment(s, /*synced=*/true);
        } else if (!s->head->is_split() && s->head->is_free() && !pools_.held(s->pool)) {
          release_segment(s->head);
        }
      }
      s = next;
    }
    for (Segment* s = segment_list_.head(); s != nullptr; s = s->list_next) {
      if (s->stream != stream) continue;
      rehome_segment(s, add_shard_exclusive(Stream{}, s->pool));
    }
  }
  debug_validate();
}

// Moves segment `s` (every block) to `home`'s stream (exclusive).
template <DeviceBackend Backend>
void CachingAllocator<Backend>::rehome_segment(Segment* s, Shard& home) {
  Pool& pool = s->small_pool ? small_ : large_;
  Tree& from = pool.at(s->stream, s->pool);
  Tree& to = home.trees[pool.small];
  for (const Block* b = s->head; b != nullptr; b = b->next()) {  // first: nothing throws below
    if (b->mapped && b->is_free()) to.reserve(b->size);
  }
  for (Block* b = s->head; b != nullptr; b = b->next()) {
    const bool in_tree = b->mapped && b->is_free();
    if (in_tree) from.erase(b);
    b->stream = home.stream;
    if (in_tree) pool.insert_free(to, b);
  }
  s->stream = home.stream;
}

// The shard of `s`, created if new, inside an exclusive section (the device mutex, the fold
// lock and every shard held): created locked, as ExclusiveLock gives back every shard.
template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::add_shard_exclusive(Stream s,
                                                                                          std::uint32_t pool) {
  for (const auto& sh : shards_.all()) {
    if (sh->stream == s && sh->pool == pool) return *sh;
  }
  return add_shard(s, /*exclusive=*/true, pool);  // taken, with every other shard
}

GPUMEMPROF_NAMESPACE_END
