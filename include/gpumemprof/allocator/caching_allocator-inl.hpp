// Layer 2: CachingAllocator's slow paths -- new segments, the OOM sequence, cross-stream events,
// cache release, garbage collection, introspection and validate(). Included by
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
  stats_.max_split_size = cfg_.max_split_size_stat();
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
    std::lock_guard lock(device_mutex_);  // no other thread may use a dying allocator
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
    std::lock_guard lock(bucket.lock);
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
bool CachingAllocator<Backend>::set_category(void* ptr, std::uint32_t category, bool only_untagged) {
  // Exclusive: the block's free events read its category under its shard, and the sinks must
  // see the change in the allocator's event order.
  ExclusiveLock lock(*this);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Block* b = nullptr;
  {
    auto& bucket = bucket_of(addr);
    std::lock_guard bucket_lock(bucket.lock);
    b = bucket.value.find(addr);
  }
  if (b == nullptr || b->category == category || (only_untagged && b->category != 0)) return false;
  const std::uint32_t previous = b->category;
  b->category = category;
  if (sinks_.count() != 0) {
    sinks_.emit({TraceAction::category_change, b->addr, b->requested, b->stream, b->context, false, category, previous});
  }
  return true;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::shard_slow(Stream s) {
  std::lock_guard lock(device_mutex_);
  for (const auto& sh : shards_) {
    if (sh->stream == s) return *sh;
  }
  // A new stream. ExclusiveLock takes the device mutex (held here) before the shards, so no
  // exclusive section can miss the new shard's lock; folds read the list under fold_mutex_.
  std::lock_guard fold_lock(fold_mutex_);
  if (!journaling_ && !shards_.empty()) {
    // The second stream: the first shard's lock no longer orders every operation. Switch to
    // journals under that lock (its hot path reads the flag under it).
    std::lock_guard first(shards_.front()->mutex);
    journaling_ = true;
  }
  return add_shard(s);
}

// Adds the shard of new stream `s` (the device mutex and the fold lock held, and journaling_
// set if another shard exists -- or every shard held).
template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::add_shard(Stream s) {
  if (!shards_.empty() && !journaling_) journaling_ = true;
  fold_runs_.reserve(2 * (shards_.size() + 1));  // two runs per shard: no allocation in a fold
  auto& sh = shards_.emplace_back(std::make_unique<Shard>(s));
  if (const std::size_t n = fast_count_.load(std::memory_order_relaxed); n < kFastShards) {
    fast_shards_[n].store(sh.get(), std::memory_order_relaxed);
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
  return hand_out(shard, pool_of(block), block, size, requested, /*journal_length=*/nullptr);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::deallocate_exclusive(void* ptr) {
  ExclusiveLock lock(*this);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto& bucket = bucket_of(addr);
  Block* b = nullptr;
  {
    std::lock_guard bucket_lock(bucket.lock);
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
    std::lock_guard bucket_lock(bucket.lock);
    bucket.value.erase(addr);
  }
  b->allocated = false;
  apply_unallocate(pool.stat_pool, static_cast<std::int64_t>(b->size));
  notify_block(TraceAction::free_requested, *b);
  if (!deferred) apply_free(free_block(pool.at(b->stream), block_records_, b, /*deferred=*/false));
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
MemoryStats CachingAllocator<Backend>::memory_stats() const {
  return read_stats([this] { return stats_; });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reset_peak_memory_stats() {
  read_stats([this] { stats_.reset_peak(); });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reset_accumulated_memory_stats() {
  read_stats([this] { stats_.reset_accumulated(); });
}

// A fold is a serial order of the operations that is consistent with real time. It reads the
// cut C first, then visits the shards one by one (lock, take the whole journal, unlock), applies
// the records stamped before C in stamp order and keeps the others for the next fold. (Taking
// only those before C under the lock would copy, under it, all that were stamped while the
// folder waited -- many, when it was descheduled.) No record stamped before C reaches a shard
// after its visit: such a record is appended under the shard's lock by an operation that took
// the lock after the visit released it, so after C was read, and it read its stamp after taking
// the lock; the stamps are monotonic across cores (stamp_clock.hpp), so its stamp is >= C.
// Hence this fold applies every operation stamped before C, later folds only later ones, and
// each shard's records (in its lock's order) are sorted. Operations that overlap a reader are ordered before or after
// it by their stamps, which is a valid linearization.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::fold_locked(bool all_held) const {
  if (!journaling_) return;  // one shard: its hot path wrote the stats directly
  std::uint64_t cut = detail::StatJournal::kAll;
  if (!all_held) {
    cut = detail::stamp_fenced();
    // with_lock() folded on entry and holds every shard: no record can be pending, and the
    // shards cannot be visited. (Read after the cut: the section ends, and new records are
    // stamped, only after this read.)
    if (quiescent_.load(std::memory_order_acquire)) return;
  }
  // No allocation: the journal's buffer is swapped with the shard's empty `fresh` run, and the
  // records left over (stamped at or after C) become the next fold's `carried` run by another
  // swap. The carried records precede every later cut (they were stamped before this visit), so
  // the next fold applies them all and its `carried` run is empty again when it swaps.
  for (const auto& sh : shards_) {
    if (!all_held && sh->parked.load(std::memory_order_relaxed)) continue;  // nothing to take
    if (!all_held) sh->lock_for_fold();
    sh->journal.take_all(sh->fresh.records);
    if (!all_held) sh->mutex.unlock();
    // Carried records first: equal stamps merge in run order. fold_runs_ is reserved: no allocation.
    if (sh->carried.has_before(cut)) fold_runs_.push_back(&sh->carried);
    if (sh->fresh.has_before(cut)) fold_runs_.push_back(&sh->fresh);
  }
  if (!fold_runs_.empty()) {
    std::lock_guard lock(stats_lock_);
    detail::merge_by_stamp(fold_runs_, cut, [this](const detail::StatRecord& r) { apply_record(r); });
  }
  for (const auto& sh : shards_) {
    if (sh->fresh.records.empty()) continue;
    if (sh->carried.records.empty()) {
      sh->carried.records.swap(sh->fresh.records);
    } else {
      sh->carried.add(sh->fresh.records);  // not reached while stamps are monotonic; may allocate
    }
  }
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
std::uint64_t CachingAllocator<Backend>::open_peak_window() {
  return read_stats([this] { return windows_.open(stats_.allocated_bytes[StatPool::all].current); });
}

template <DeviceBackend Backend>
std::int64_t CachingAllocator<Backend>::close_peak_window(std::uint64_t id) {
  return read_stats([this, id] { return windows_.close(id); });
}

template <DeviceBackend Backend>
std::int64_t CachingAllocator<Backend>::peak_window(std::uint64_t id) const {
  return read_stats([this, id] { return windows_.peak(id); });
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
  std::lock_guard lock(device_mutex_);
  oom_observers_.push_back(std::move(observer));
}

template <DeviceBackend Backend>
std::vector<SegmentView> CachingAllocator<Backend>::segments() const {
  std::vector<SegmentView> out;
  visit_segments([&out](const SegmentView& v) { out.push_back(v); });
  return out;
}

template <DeviceBackend Backend>
BlockView CachingAllocator<Backend>::view_of(const Block& b) {
  BlockView bv;
  bv.address = b.addr;
  bv.size = b.size;
  if (b.allocated) {
    bv.state = BlockState::active_allocated;
  } else if (b.event_count > 0) {
    bv.state = BlockState::active_pending_free;
  } else {
    bv.state = BlockState::inactive;
  }
  bv.requested_size = bv.state == BlockState::inactive ? 0 : b.requested;
  bv.context = bv.state == BlockState::inactive ? 0 : b.context;
  bv.category = bv.state == BlockState::inactive ? 0 : b.category;
  return bv;
}

template <DeviceBackend Backend>
template <class F>
void CachingAllocator<Backend>::for_each_view(const Segment& s, F&& f) const {
  const Block* b = s.head;
  while (b != nullptr) {
    if (!b->mapped) {
      b = b->next;
      continue;
    }
    SegmentView v;  // a plain segment, or one run of mapped pages of an expandable one
    v.address = b->addr;
    v.stream = s.stream;
    v.is_large = !s.small_pool;
    v.is_expandable = s.expandable;
    v.context = s.context;
    for (; b != nullptr && b->mapped; b = b->next) {
      v.size += b->size;
      v.blocks.push_back(view_of(*b));
    }
    f(std::as_const(v));
  }
}

// ------------------------------------------------------------------------------------------------
// Getting memory when no cached block fits: PyTorch's malloc sequence.

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::allocate_slow(Shard& shard, Pool& pool,
                                                                                    Stream stream, std::size_t size,
                                                                                    std::size_t requested,
                                                                                    ExclusiveLock& lock) {
  if (gc_active_) garbage_collect_cached_blocks();
  if (expandable_) {
    Block* b = grow_expandable(pool, stream, size, false);
    if (b == nullptr) {  // unmap every free page (after waiting for all streams) and try once more
      release_cached_blocks();
      b = grow_expandable(pool, stream, size, true);
    }
    if (b == nullptr) throw_oom(pool, stream, size, requested, lock);
    return b;
  }
  // new_segment lets go of locks across the backend's malloc: each step below reads the state
  // afresh, with every lock held again (PyTorch's malloc warns of the same around alloc_block).
  const std::size_t segment_bytes = segment_size_for(size);
  Block* b = new_segment(shard, pool, segment_bytes, false, lock);
  // Free just enough oversize cached blocks, then try again.
  if (b == nullptr && release_available_cached_blocks(pool, stream, size)) {
    b = new_segment(shard, pool, segment_bytes, false, lock);
  }
  // Wait for every stream, return every fully free segment, and try one last time.
  if (b == nullptr) {
    release_cached_blocks(&lock);
    b = new_segment(shard, pool, segment_bytes, true, lock);
  }
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
  Segment* s = segment_records_.get();
  Block* b = nullptr;
  void* p = nullptr;
  reserving_ += segment_bytes;
  try {
    b = block_records_.get();
    // The device's malloc may take milliseconds: other streams' hot paths go on meanwhile, and
    // with release_lock_on_cudamalloc everything does (see the top of caching_allocator.hpp).
    const bool keep = !cfg_.release_lock_on_cudamalloc;
    p = lock.released_during(keep, keep ? &shard : nullptr, [&] { return backend_.malloc(segment_bytes); });
  } catch (...) {
    reserving_ -= segment_bytes;
    if (b != nullptr) block_records_.put(b);
    segment_records_.put(s);
    throw;
  }
  reserving_ -= segment_bytes;
  if (p == nullptr) {
    block_records_.put(b);
    segment_records_.put(s);
    return nullptr;
  }
  s->addr = reinterpret_cast<std::uintptr_t>(p);
  s->size = segment_bytes;
  s->stream = stream;
  s->small_pool = pool.small;
  s->head = b;
  link_segment(s);
  b->addr = s->addr;
  b->size = segment_bytes;
  b->stream = stream;
  b->segment = s;
  b->small_pool = pool.small;
  total_reserved_ += segment_bytes;
  stat_add(stats_.segment, pool.stat_pool, 1);
  stat_add(stats_.reserved_bytes, pool.stat_pool, static_cast<std::int64_t>(segment_bytes));
  if (segment_bytes >= cfg_.max_split_size) stats_.oversize_segments.increase(1);
  ++stats_.num_device_alloc;
  s->context = notify(TraceAction::segment_alloc, s->addr, segment_bytes, stream);
  insert_free(pool, shard.trees[pool.small], b);  // free until hand_out takes it
  return b;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_segment(Block* whole) {
  Segment* s = whole->segment;
  Pool& pool = pool_of(whole);
  backend_.free(reinterpret_cast<void*>(s->addr));  // first: if it throws, nothing changed
  pool.find(s->stream)->erase(whole);
  forget_segment(whole);
}

// The bookkeeping of a segment given back to the device, its whole block already out of its tree.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::forget_segment(Block* whole) {
  Segment* s = whole->segment;
  Pool& pool = pool_of(whole);
  notify(TraceAction::segment_free, s->addr, s->size, s->stream, s->context);
  total_reserved_ -= s->size;
  stat_sub(stats_.segment, pool.stat_pool, 1);
  stat_sub(stats_.reserved_bytes, pool.stat_pool, static_cast<std::int64_t>(s->size));
  if (s->size >= cfg_.max_split_size) stats_.oversize_segments.decrease(1);
  ++stats_.num_device_free;
  unlink_segment(s);
  block_records_.put(whole);
  segment_records_.put(s);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::link_segment(Segment* s) {
  s->list_prev = segments_tail_;
  s->list_next = nullptr;
  (segments_tail_ != nullptr ? segments_tail_->list_next : segments_head_) = s;
  segments_tail_ = s;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::unlink_segment(Segment* s) {
  (s->list_prev != nullptr ? s->list_prev->list_next : segments_head_) = s->list_next;
  (s->list_next != nullptr ? s->list_next->list_prev : segments_tail_) = s->list_prev;
}

template <DeviceBackend Backend>
bool CachingAllocator<Backend>::release_available_cached_blocks(Pool& pool, Stream stream, std::size_t size) {
  const std::size_t max_split = cfg_.max_split_size;
  if (max_split == AllocatorConfig::unlimited || expandable_) return false;
  Tree* tree = pool.find(stream);
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
  synchronize_and_free_events();
  release_pool(large_, lock);
  release_pool(small_, lock);
  if (expandable_) release_expandable();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_pool(Pool& pool, ExclusiveLock* lock) {
  std::vector<Block*> whole;
  pool.for_each_tree([&whole](Stream, Tree& tree) {
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
  for (Block* b : whole) pool.at(b->stream).erase(b);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    try {
      lock->released_during(true, nullptr, [&] { backend_.free(reinterpret_cast<void*>(whole[i]->segment->addr)); });
    } catch (...) {  // the rest stay cached, as release_segment leaves them
      for (std::size_t j = i; j < whole.size(); ++j) insert_free(pool, whole[j]);
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
  auto queue_of = [this](Stream s) {
    return std::find_if(events_.begin(), events_.end(), [s](const StreamEvents& se) { return se.stream == s; });
  };
  std::size_t done = 0;
  try {
    for (; done < uses.size(); ++done) {
      const Stream s = uses[done];
      auto it = queue_of(s);
      if (it == events_.end()) {  // an empty queue is harmless: process_events drops it
        events_.push_back(StreamEvents{s, {}});
        it = std::prev(events_.end());
      }
      const Event e = backend_.record_event(s);
      try {
        it->queue.push_back({e, b});
      } catch (...) {
        backend_.release_event(e);
        throw;
      }
      ++b->event_count;
      ++pending_events_;
    }
  } catch (...) {  // take back the events recorded so far (each the last of its queue): no change
    for (std::size_t i = done; i-- > 0;) {
      auto& q = queue_of(uses[i])->queue;
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
  // Per stream, in recording order, stop at the first event not yet complete.
  for (auto it = events_.begin(); it != events_.end();) {
    auto& q = it->queue;
    while (!q.empty()) {
      const PendingEvent pe = q.front();
      if (!backend_.query_event(pe.event)) break;
      if (pe.block->event_count == 1) reserve_free(pool_of(pe.block).at(pe.block->stream), pe.block);
      backend_.release_event(pe.event);
      q.pop_front();
      --pending_events_;
      if (--pe.block->event_count == 0) free_block_exclusive(pe.block);
    }
    it = q.empty() ? events_.erase(it) : std::next(it);
  }
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::synchronize_and_free_events() {
  ++stats_.num_sync_all_streams;
  while (!events_.empty()) {
    synchronize_queue(events_.front().queue);
    events_.erase(events_.begin());
  }
}

// Waits for each event of one stream's queue and frees the blocks that waited for it last.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::synchronize_queue(std::deque<PendingEvent>& q) {
  while (!q.empty()) {
    const PendingEvent pe = q.front();
    backend_.synchronize_event(pe.event);
    if (pe.block->event_count == 1) reserve_free(pool_of(pe.block).at(pe.block->stream), pe.block);
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
  {
    ExclusiveLock lock(*this);
    // 1. Its work so far completes (an event on it, waited for): what it used is free to reuse.
    const Event done = backend_.record_event(stream);
    backend_.synchronize_event(done);
    backend_.release_event(done);
    // 2. Its pending events complete; the blocks that waited for them are freed.
    if (auto it = std::find_if(events_.begin(), events_.end(),
                               [stream](const StreamEvents& se) { return se.stream == stream; });
        it != events_.end()) {
      synchronize_queue(it->queue);
      events_.erase(it);
    }
    // 3. Live blocks of other streams forget their uses on it (that work is done).
    for (Segment* s = segments_head_; s != nullptr; s = s->list_next) {
      for (Block* b = s->head; b != nullptr; b = b->next) {
        if (b->stream_uses == nullptr) continue;
        auto& uses = *b->stream_uses;
        uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
      }
    }
    // 4. Its cached memory goes back to the device: whole free segments, free expandable pages.
    // 5. Its segments that still hold allocated or pending blocks move to the default stream,
    //    free blocks included, so later frees, reuse and page moves never name the handle again
    //    and a new stream with the same handle starts with nothing.
    Shard* home = nullptr;
    for (Segment* s = segments_head_; s != nullptr;) {
      Segment* next = s->list_next;
      if (s->stream == stream) {
        if (s->expandable) {
          release_expandable_segment(s, /*synced=*/true);
        } else if (s->head->next == nullptr && s->head->is_free()) {
          release_segment(s->head);
        }
      }
      s = next;
    }
    if constexpr (VirtualMemoryBackend<Backend>) {
      if (expandable_) backend_.release_spare_pages();
    }
    for (Segment* s = segments_head_; s != nullptr; s = s->list_next) {
      if (s->stream != stream) continue;
      if (home == nullptr) home = &add_shard_exclusive(Stream{});
      rehome_segment(s, *home);
    }
  }
  debug_validate();
}

// Moves segment `s` (every block) to `home`'s stream (exclusive).
template <DeviceBackend Backend>
void CachingAllocator<Backend>::rehome_segment(Segment* s, Shard& home) {
  Pool& pool = s->small_pool ? small_ : large_;
  Tree& from = pool.at(s->stream);
  Tree& to = home.trees[pool.small];
  for (const Block* b = s->head; b != nullptr; b = b->next) {  // first: nothing throws below
    if (b->mapped && b->is_free()) to.reserve(b->size);
  }
  for (Block* b = s->head; b != nullptr; b = b->next) {
    const bool in_tree = b->mapped && b->is_free();
    if (in_tree) from.erase(b);
    b->stream = home.stream;
    if (in_tree) insert_free(pool, to, b);
  }
  s->stream = home.stream;
}

// The shard of `s`, created if new, inside an exclusive section (the device mutex, the fold
// lock and every shard held): created locked, as ExclusiveLock gives back every shard.
template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Shard& CachingAllocator<Backend>::add_shard_exclusive(Stream s) {
  for (const auto& sh : shards_) {
    if (sh->stream == s) return *sh;
  }
  Shard& sh = add_shard(s);
  sh.mutex.lock();
  return sh;
}

// ------------------------------------------------------------------------------------------------
// Errors.

template <DeviceBackend Backend>
void CachingAllocator<Backend>::throw_invalid_pointer(const void* ptr, const char* what) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  char where[32];
  std::snprintf(where, sizeof where, "%p", ptr);
  std::string why = "it was not allocated by this allocator (a foreign pointer)";
  for (const Segment* s = segments_head_; s != nullptr; s = s->list_next) {
    if (addr < s->addr || addr >= s->addr + span_of(*s)) continue;
    for (const Block* b = s->head; b != nullptr; b = b->next) {
      if (addr < b->addr || addr >= b->addr + b->size) continue;
      if (b->allocated) {
        why = "it points " + std::to_string(addr - b->addr) + " bytes inside an allocation of " +
              std::to_string(b->requested) + " bytes; pass the pointer that allocate() returned";
      } else {
        why = "it was already freed (double free)";
      }
    }
  }
  throw InvalidPointerError(std::string("gpumemprof: ") + what + "(" + where + ") on " + backend_.name() + ": " + why +
                            ". The allocator is unchanged.");
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::throw_oom(Pool& pool, Stream stream, std::size_t size, std::size_t requested,
                                          ExclusiveLock& lock) {
  const MemInfo info = backend_.mem_get_info();
  const std::size_t segment_bytes = expandable_ ? size : segment_size_for(size);
  notify(TraceAction::oom, info.free, size, stream);
  ++stats_.num_ooms;

  OomInfo oi;
  oi.device = backend_.index();
  oi.requested_bytes = requested;
  oi.allocation_bytes = segment_bytes;
  oi.device_total = allowed_max_ ? *allowed_max_ : info.total;
  oi.device_free = info.free;
  oi.allocated_bytes = static_cast<std::size_t>(stats_.allocated_bytes[StatPool::all].current);
  oi.reserved_bytes = static_cast<std::size_t>(stats_.reserved_bytes[StatPool::all].current);
  if (Tree* t = pool.find(stream); t != nullptr && !t->empty()) oi.largest_free_block = t->last()->size;

  const std::string name = backend_.name();
  const bool is_cuda = name.rfind("cuda:", 0) == 0;
  std::string msg = (is_cuda ? std::string("CUDA") : "Device " + name) + " out of memory. Tried to allocate " +
                    format_size(segment_bytes) + " (a request of " + format_size(requested) + "). " +
                    (is_cuda ? "GPU " + std::to_string(oi.device) : "Device " + name) + " has a total capacity of " +
                    format_size(info.total) + " of which " + format_size(info.free) + " is free. ";
  if (allowed_max_) msg += format_size(*allowed_max_) + " allowed; ";
  const std::size_t unallocated = oi.reserved_bytes - oi.allocated_bytes;
  msg += "Of the allocated memory " + format_size(oi.allocated_bytes) + " is allocated by gpumemprof, and " +
         format_size(unallocated) + " is reserved by gpumemprof but unallocated.";
  if (!expandable_) {
    msg +=
        " If reserved but unallocated memory is large try setting "
        "GPUMEMPROF_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";
  }
  if (unallocated >= size) {
    msg +=
        " Fragmentation is the cause here: enough memory is reserved but unallocated, yet the "
        "largest free cached block (" +
        format_size(oi.largest_free_block) + ") is smaller than the " + format_size(size) + " needed.";
  }
  auto observers = oom_observers_;
  lock.unlock();  // observers may inspect the allocator
  for (auto& o : observers) {
    try {
      o(oi);
    } catch (...) {  // NOLINT(bugprone-empty-catch): an observer must not hide the OOM
    }
  }
  throw OutOfMemoryError(std::move(msg), requested);
}

// ------------------------------------------------------------------------------------------------
// validate(): every invariant of block.hpp, and every stat recounted from the blocks.

template <DeviceBackend Backend>
void CachingAllocator<Backend>::validate() const {
  // No bucket lock: blocks enter and leave the pointer map only with their shard held, so with
  // every shard held the map stands still (lookups meanwhile only read it). Taking all 256
  // bucket locks would also pass ThreadSanitizer's limit of locks held at once.
  ExclusiveLock lock(*this);
  validate_locked();
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::validate_locked() const {
  auto fail = [this](const std::string& what) {
    throw std::logic_error("gpumemprof allocator invariant broken on " + backend_.name() + ": " + what);
  };
  MemoryStats expect;
  std::size_t free_blocks = 0;
  std::size_t allocated_blocks = 0;
  std::size_t pending_blocks = 0;
  std::size_t reserved = 0;
  const Segment* prev_seg = nullptr;
  for (const Segment* s = segments_head_; s != nullptr; prev_seg = s, s = s->list_next) {
    if (s->list_prev != prev_seg) fail("segment list back link");
    const StatPool sp = s->small_pool ? StatPool::small_pool : StatPool::large_pool;
    if (!s->expandable) {  // PyTorch counts mapped bytes of expandable segments, not segments
      expect.segment[StatPool::all].current += 1;
      expect.segment[sp].current += 1;
      if (s->size >= cfg_.max_split_size) expect.oversize_segments.current += 1;
    } else if (!expandable_ || s->addr != s->reservation.base) {
      fail("expandable segment without a reservation");
    }
    expect.reserved_bytes[StatPool::all].current += static_cast<std::int64_t>(s->size);
    expect.reserved_bytes[sp].current += static_cast<std::int64_t>(s->size);
    reserved += s->size;
    if (s->head == nullptr || s->head->prev != nullptr || s->head->addr != s->addr) fail("segment head");
    std::uintptr_t at = s->addr;
    std::size_t mapped = 0;
    const Block* before = nullptr;
    for (const Block* b = s->head; b != nullptr; before = b, b = b->next) {
      if (b->mapped) mapped += b->size;
      if (!b->mapped) {  // a hole of an expandable segment
        if (!s->expandable) fail("unmapped block in a segment that is not expandable");
        if (!b->is_free() || b->requested != 0) fail("an unmapped block is in use");
        if (b->addr % page_ != 0 || b->size % page_ != 0) fail("an unmapped block is not page aligned");
        if (before != nullptr && !before->mapped) fail("two unmapped neighbours were not merged");
        if (b->prev != before) fail("block prev link");
        if (b->segment != s || b->stream != s->stream || b->small_pool != s->small_pool)
          fail("hole of another segment");
        if (b->addr != at) fail("blocks do not tile their segment (gap or overlap)");
        at += b->size;
        continue;
      }
      if (b->prev != before) fail("block prev link");
      if (b->segment != s) fail("block points at another segment");
      if (b->addr != at) fail("blocks do not tile their segment (gap or overlap)");
      if (b->size == 0 || b->size % kMinBlockSize != 0) fail("block size not a positive multiple of 512");
      if (b->stream != s->stream || b->small_pool != s->small_pool) fail("block stream/pool differs from its segment");
      at += b->size;
      if (b->allocated) {
        ++allocated_blocks;
        if (find_pointer(b->addr) != b) fail("allocated block missing from the pointer map");
        expect.allocation[StatPool::all].current += 1;
        expect.allocation[sp].current += 1;
        expect.allocated_bytes[StatPool::all].current += static_cast<std::int64_t>(b->size);
        expect.allocated_bytes[sp].current += static_cast<std::int64_t>(b->size);
        if (b->size >= cfg_.max_split_size) expect.oversize_allocations.current += 1;
      } else if (b->event_count > 0) {
        ++pending_blocks;
        if (find_pointer(b->addr) == b) fail("pending-free block still in the pointer map");
      } else {
        ++free_blocks;
        const Pool& pool = s->small_pool ? small_ : large_;
        const Tree* tree = pool.find(s->stream);
        if (tree == nullptr || !tree->contains(b)) fail("free block missing from its pool's tree");
        if (before != nullptr && before->is_free() && before->mapped) fail("two free neighbours were not merged");
        if (b->is_split() && !s->expandable) {  // free pages of expandable segments can always go back
          expect.inactive_split[StatPool::all].current += 1;
          expect.inactive_split[sp].current += 1;
          expect.inactive_split_bytes[StatPool::all].current += static_cast<std::int64_t>(b->size);
          expect.inactive_split_bytes[sp].current += static_cast<std::int64_t>(b->size);
        }
      }
      if (!b->is_free()) {
        expect.active[StatPool::all].current += 1;
        expect.active[sp].current += 1;
        expect.active_bytes[StatPool::all].current += static_cast<std::int64_t>(b->size);
        expect.active_bytes[sp].current += static_cast<std::int64_t>(b->size);
        expect.requested_bytes[StatPool::all].current += static_cast<std::int64_t>(b->requested);
        expect.requested_bytes[sp].current += static_cast<std::int64_t>(b->requested);
        if (b->requested == 0 || round(b->requested) > b->size) fail("active block's requested size does not fit it");
      }
    }
    if (at != s->addr + span_of(*s)) fail("blocks do not cover their segment");
    if (mapped != s->size) fail("a segment's size is not its mapped bytes");
  }
  if (prev_seg != segments_tail_) fail("segment list tail");
  if (reserved != total_reserved_) fail("reserved byte count");
  std::size_t mapped_pointers = 0;
  ptrs_.for_each([&mapped_pointers](const detail::PointerMap<Block>& m) { mapped_pointers += m.size(); });
  if (allocated_blocks != mapped_pointers) fail("pointer map holds blocks that are not allocated");
  std::size_t tree_nodes = 0;
  for (const Pool* pool : {&small_, &large_}) {
    pool->for_each_tree([&](Stream stream, const Tree& tree) {
      tree.check();
      tree_nodes += tree.size();
      for (const Block* b = tree.first(); b != nullptr; b = tree.next(const_cast<Block*>(b))) {
        if (!b->is_free() || !b->mapped || b->segment->stream != stream || b->small_pool != pool->small) {
          fail("a tree holds a block that is not free, or of another stream/pool");
        }
      }
    });
  }
  if (tree_nodes != free_blocks) fail("free trees hold blocks that are not in any segment");
  std::size_t queued = 0;
  for (const auto& se : events_) {
    for (const auto& pe : se.queue) {
      ++queued;
      if (pe.block->allocated || pe.block->event_count == 0)
        fail("an event waits for a block that is not pending free");
    }
  }
  if (queued != pending_events_) fail("pending event count");
  if (pending_blocks > queued) fail("pending-free blocks without events");

  auto check_current = [&](const char* name, const StatArray& got, const StatArray& want) {
    for (std::size_t p = 0; p < 3; ++p) {
      if (got.pools[p].current != want.pools[p].current) {
        fail(std::string("stat ") + name + "." + stat_pool_names[p] + ".current is " +
             std::to_string(got.pools[p].current) + ", recount gives " + std::to_string(want.pools[p].current));
      }
      if (got.pools[p].peak < got.pools[p].current) fail(std::string("stat ") + name + " peak below current");
    }
  };
#define GPUMEMPROF_CHECK_(name) check_current(#name, stats_.name, expect.name);
  GPUMEMPROF_POOLED_STATS(GPUMEMPROF_CHECK_)
#undef GPUMEMPROF_CHECK_
  if (stats_.oversize_allocations.current != expect.oversize_allocations.current) fail("oversize_allocations.current");
  if (stats_.oversize_segments.current != expect.oversize_segments.current) fail("oversize_segments.current");
  const AllocatorGauges g = gauges_locked();
  if (g.total_allocations - g.total_frees != static_cast<std::uint64_t>(stats_.allocation[StatPool::all].current)) {
    fail("lifetime allocation and free totals disagree with the current allocation count");
  }
}

GPUMEMPROF_NAMESPACE_END
