// Layer 2: CachingAllocator's introspection -- segment views, the errors that explain a bad
// pointer or an OOM from the allocator's state, and validate(). Included by
// caching_allocator.hpp; not a header to include on its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

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

// ------------------------------------------------------------------------------------------------
// Errors.

template <DeviceBackend Backend>
void CachingAllocator<Backend>::throw_invalid_pointer(const void* ptr, const char* what) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  char where[32];
  std::snprintf(where, sizeof where, "%p", ptr);
  std::string why = "it was not allocated by this allocator (a foreign pointer)";
  for (const Segment* s = segment_list_.head(); s != nullptr; s = s->list_next) {
    if (addr < s->addr || addr >= s->addr + span_of(*s)) continue;
    for (const Block* b = s->head; b != nullptr; b = b->next()) {
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
  const std::size_t segment_bytes = compacting_ ? size : segment_size_for(size);  // PyTorch: alloc_size
  delivery_.notify(delivery_.slow_lane(), TraceAction::oom, info.free, size, stream);
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
  std::vector<std::size_t> pool_segments(pools_.size(), 0);
  for (const Segment* s = segment_list_.head(); s != nullptr; prev_seg = s, s = s->list_next) {
    if (s->list_prev != prev_seg) fail("segment list back link");
    if (s->pool >= pools_.size() || (s->pool != 0 && (!pools_.at(s->pool).live || s->expandable))) {
      fail("a segment of a private pool that does not exist (or an expandable one)");
    }
    ++pool_segments[s->pool];
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
    if (const char* broken = detail::SegmentChain::check_links(*s, span_of(*s)); broken != nullptr) fail(broken);
    std::size_t mapped = 0;
    const Block* before = nullptr;
    for (const Block* b = s->head; b != nullptr; before = b, b = b->next()) {
      if (b->mapped) mapped += b->size;
      if (!b->mapped) {  // a hole of an expandable segment
        if (!s->expandable) fail("unmapped block in a segment that is not expandable");
        if (!b->is_free() || b->requested != 0) fail("an unmapped block is in use");
        const std::size_t page = executor_.page_of(s->small_pool);
        if ((b->addr - s->addr) % page != 0 || b->size % page != 0) fail("an unmapped block is not page aligned");
        if (before != nullptr && !before->mapped) fail("two unmapped neighbours were not merged");
        if (b->stream != s->stream || b->small_pool != s->small_pool) fail("hole of another segment");
        continue;
      }
      if (b->size % kMinBlockSize != 0) fail("block size not a positive multiple of 512");
      if (b->stream != s->stream || b->small_pool != s->small_pool || b->pool != s->pool) {
        fail("block stream/pool differs from its segment");
      }
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
        const Tree* tree = pool.find(s->stream, s->pool);
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
    if (mapped != s->size) fail("a segment's size is not its mapped bytes");
  }
  if (prev_seg != segment_list_.tail()) fail("segment list tail");
  if (reserved != total_reserved_) fail("reserved byte count");
  std::size_t mapped_pointers = 0;
  ptrs_.for_each([&mapped_pointers](const detail::PointerMap<Block>& m) { mapped_pointers += m.size(); });
  if (allocated_blocks != mapped_pointers) fail("pointer map holds blocks that are not allocated");
  std::size_t tree_nodes = 0;
  for (const Pool* pool : {&small_, &large_}) {
    pool->for_each_pool_tree([&](std::uint32_t p, Stream stream, const Tree& tree) {
      tree.check();
      tree_nodes += tree.size();
      for (const Block* b = tree.first(); b != nullptr; b = tree.next(const_cast<Block*>(b))) {
        if (!b->is_free() || !b->mapped || b->segment->stream != stream || b->small_pool != pool->small ||
            b->pool != p) {
          fail("a tree holds a block that is not free, or of another stream/pool");
        }
      }
    });
  }
  if (tree_nodes != free_blocks) fail("free trees hold blocks that are not in any segment");
  std::size_t queued = 0;
  for (const auto& se : cross_stream_.queues()) {
    for (const auto& pe : se.queue) {
      ++queued;
      if (pe.block->allocated || pe.block->event_count == 0)
        fail("an event waits for a block that is not pending free");
    }
  }
  for (const Block* b : cross_stream_.deferred()) {
    // (its uses may all be gone: release_stream takes them; the next process_events frees it)
    if (b->allocated || b->event_count != 1 || b->stream_uses == nullptr) {
      fail("a deferred free is not a pending block that waits for its events");
    }
  }
  const std::size_t deferred = cross_stream_.deferred().size();
  if (queued + deferred != events_waiting()) fail("pending event count");
  if (pending_blocks > queued + deferred) fail("pending-free blocks without events");
  std::size_t routes = 0;
  for (std::uint32_t i = 1; i < pools_.size(); ++i) {
    const auto& e = pools_.at(i);
    if (e.live && e.segments != pool_segments[i]) fail("a private pool's segment count");
    if (e.live && e.use_count <= 0 && e.segments == 0) fail("a private pool with no user and no segment lives on");
  }
  for (std::uint32_t i = 0; i < pools_.size(); ++i) routes += pools_.routes_to(i);
  if (routes != pending_events_ / kRouteUnit) fail("routes to private pools and the hot path's count differ");

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
  const AllocatorGauges g = gauges_of(ledger_.state());
  if (g.total_allocations - g.total_frees != static_cast<std::uint64_t>(stats_.allocation[StatPool::all].current)) {
    fail("lifetime allocation and free totals disagree with the current allocation count");
  }
}

GPUMEMPROF_NAMESPACE_END
