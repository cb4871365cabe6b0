// Layer 2: the bodies of ExpandableExecutor (expandable_executor.hpp) -- carrying out
// expandable_planner.hpp's plans: reservations, mapping holes, unmapping free pages, giving
// reservations back. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "gpumemprof/allocator/expandable_executor.hpp"
#include "gpumemprof/allocator/expandable_planner.hpp"
#include "gpumemprof/allocator/size_policy.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

template <DeviceBackend Backend>
ExpandableExecutor<Backend>::ExpandableExecutor(Mutex& device, SpinLock& stats_lock, const Parts& parts) noexcept
    : device_(device),
      stats_lock_(stats_lock),
      backend_(parts.backend),
      cfg_(parts.config),
      segment_list_(parts.segments),
      block_records_(parts.records),
      small_(parts.small),
      large_(parts.large),
      total_reserved_(parts.reserved),
      allowed_max_(parts.allowed_max),
      stats_(parts.stats),
      delivery_(parts.delivery) {}

template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::configure(std::size_t page, bool compacting) {
  state_ = ExpandableState(page, compacting);
  compacting_ = compacting;
}

template <DeviceBackend Backend>
std::size_t ExpandableExecutor<Backend>::page_of(bool small_pool) const noexcept {
  return state_.page_of(small_pool);
}

template <DeviceBackend Backend>
ExpandableLayout& ExpandableExecutor<Backend>::refresh_layout() {
  return state_.refresh(segment_list_.head());
}

template <DeviceBackend Backend>
std::size_t ExpandableExecutor<Backend>::try_merge(Block* dst, Block* src, ShardPool& pool) {
  return ShardPool::try_merge(dst, src, pool.at(dst->stream, dst->pool), block_records_);
}

template <DeviceBackend Backend>
Block* ExpandableExecutor<Backend>::block_at(const Segment& s, std::uintptr_t addr) noexcept {
  Block* b = s.head;
  while (b->addr + b->size <= addr) b = b->next();
  return b;
}

template <DeviceBackend Backend>
Block* ExpandableExecutor<Backend>::grow(ShardPool& pool, Stream stream, std::size_t size, bool is_retry) {
  if (is_retry) ++stats_.num_alloc_retries;
  if (compacting_) return grow_compacting(pool, stream, size);
  // PyTorch's alloc_block: the memory fraction is checked against the size a cudaMalloc would
  // have taken, then the lowest-addressed room of the stream's reservation is mapped.
  if (allowed_max_ && total_reserved_ + segment_size_for(size) > *allowed_max_) return nullptr;
  const ExpandableLayout& layout = refresh_layout();
  const auto place = find_first_fit_place(layout, stream, pool.small, size);
  return map_growth(pool, stream, size, place ? &*place : nullptr, false);
}

template <DeviceBackend Backend>
Block* ExpandableExecutor<Backend>::grow_compacting(ShardPool& pool, Stream stream, std::size_t size) {
  // A small request the small pool cannot serve takes a free block of the large pool before it
  // maps a page: the pools have reservations of their own, so a page mapped for the small pool
  // would be one more beyond the large pool's layout (or one moved from there, and back once the
  // large pool wants it: gpt2_generate's small and large requests take turns as its sequences
  // grow, 49 pages moved per replay before). It asks the device nothing before the spill: the
  // device's free memory (pages_to_recycle) is a driver call, microseconds on cuda:0, which made
  // such a pair 2-3 times slower there. The hot path takes the same block before coming here
  // (CachingAllocator::spills_small); this is for the requests that reach the slow path anyway.
  if (pool.small) {
    if (Block* b = spill_block(large_.find(stream), size); b != nullptr) return b;
  }
  const ExpandableLayout& layout = refresh_layout();
  const auto place = find_growth_place(layout, stream, pool.small, size);
  return map_growth(pool, stream, size, place ? &*place : nullptr, true);
}

// The one executor of both policies' plans: a new reservation when there is no place, the
// compacting policy's unmaps (with `may_recycle`), then the maps. The plan comes first: nothing
// has changed if building it throws.
template <DeviceBackend Backend>
Block* ExpandableExecutor<Backend>::map_growth(ShardPool& pool, Stream stream, std::size_t size,
                                               const GrowthPlace* planned, bool may_recycle) {
  ExpandableLayout& layout = state_.view();
  std::vector<Segment*>& segs = state_.segments();
  std::optional<GrowthPlace> place;
  if (planned != nullptr) place = *planned;
  if (!place) {
    segs.reserve(segs.size() + 1);  // first: nothing throws once the address range is ours
    layout.segments.emplace_back().blocks.reserve(1);
    Block* start = new_reservation(pool, stream);
    if (start == nullptr || start->size < size) {  // no address space, or beyond the device
      layout.segments.pop_back();
      if (start != nullptr) release_reservation(start->segment);
      return nullptr;
    }
    segs.push_back(start->segment);
    ExpandableState::plan_segment(*start->segment, layout.segments.back());  // one hole: the whole range
    place = GrowthPlace{segs.size() - 1, 0, 0};
  }
  Segment* seg = segs[place->segment];
  auto fail = [&]() GPUMEMPROF_REQUIRES(device_) -> Block* {  // a reservation made for nothing goes back at once
    if (!seg->head->is_split() && !seg->head->mapped) release_reservation(seg);
    return nullptr;
  };
  const PlannedSegment& where = layout.segments[place->segment];
  const std::uintptr_t begin = where.blocks[place->block].addr;
  std::vector<MapStep> maps;
  try {
    maps = pages_to_map(where, place->block, size, page_of(pool.small));
    if (may_recycle) {
      std::size_t need = 0;  // bytes of holes to map
      for (const MapStep& m : maps) need += m.bytes;
      const std::vector<UnmapStep> unmaps = pages_to_unmap(layout, pages_to_recycle(size, need), begin, begin + size);
      unmap_planned(unmaps, segs, {});
      if (allowed_max_ && total_reserved_ + need > *allowed_max_) return fail();
    }
    Block* cur = nullptr;
    for (const MapStep& m : maps) {  // unmapping may have merged holes: find each by address
      cur = map_block(block_at(*seg, m.addr), m.bytes);
      if (cur == nullptr) return fail();
    }
    if (cur == nullptr) cur = block_at(*seg, begin);  // PyTorch: a free block before a hole held it
    return cur;                                       // free, in its tree: hand_out takes it
  } catch (...) {
    fail();
    throw;
  }
}

template <DeviceBackend Backend>
std::size_t ExpandableExecutor<Backend>::pages_to_recycle(std::size_t size, std::size_t need) {
  // The budget's base: the most bytes ever live (a running high-water mark that
  // reset_peak_memory_stats does not lower), this request included (expandable_state.hpp).
  const Stat& live = stats_.allocated_bytes[StatPool::all];
  state_.note_request(live, size);
  GrowthBudget g{.reserved = total_reserved_,
                 .need = need,
                 .live_high = state_.live_high(),
                 .slack = state_.slack(live, need),
                 .allowed_max = allowed_max_,
                 .page = state_.page()};
  if constexpr (VirtualMemoryBackend<Backend>) g.device_free = backend_.mem_get_info().free;
  return bytes_to_recycle(g);
}

// Carries out the planner's unmaps, synchronizing each stream (but those in `synced`) before its
// first unmap: the pages' last users must be done.
template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::unmap_planned(const std::vector<UnmapStep>& steps, const std::vector<Segment*>& segs,
                                                std::vector<Stream> synced) {
  synced.reserve(synced.size() + steps.size());  // first: nothing throws between unmaps but the backend
  for (const UnmapStep& u : steps) {
    Segment* s = segs[u.segment];
    if (std::find(synced.begin(), synced.end(), s->stream) == synced.end()) {
      if constexpr (VirtualMemoryBackend<Backend>) backend_.synchronize_stream(s->stream);
      synced.push_back(s->stream);
    }
    unmap_pages(block_at(*s, u.block_addr), u.addr, u.bytes);
  }
}

template <DeviceBackend Backend>
Block* ExpandableExecutor<Backend>::new_reservation(ShardPool& pool, Stream stream) {
  if constexpr (VirtualMemoryBackend<Backend>) {
    // 9/8 of the device, as PyTorch reserves: room to grow even after holes were punched.
    const std::size_t total = backend_.mem_get_info().total;
    const std::size_t page = page_of(pool.small);
    const std::size_t bytes = (total + total / 8 + page - 1) / page * page;
    Segment* s = segment_list_.make();
    Block* b = nullptr;
    try {
      b = block_records_.get();
    } catch (...) {
      segment_list_.recycle(s);
      throw;
    }
    const Reservation r = backend_.reserve(bytes, page);  // one physical allocation per page, as c10
    if (r.size == 0) {
      block_records_.put(b);
      segment_list_.recycle(s);
      return nullptr;
    }
    s->addr = r.base;
    s->size = 0;
    s->stream = stream;
    s->small_pool = pool.small;
    s->expandable = true;
    s->reservation = r;
    SegmentChain::start(*s, b, r.size, /*mapped=*/false);  // one hole: the whole range
    segment_list_.link(s);
    return b;
  } else {
    (void)pool;
    (void)stream;
    return nullptr;
  }
}

template <DeviceBackend Backend>
Block* ExpandableExecutor<Backend>::map_block(Block* hole, std::size_t bytes) {
  Segment* s = hole->segment;
  // First: nothing throws once mapped. The mapped block merges with free mapped neighbours.
  std::size_t merged = bytes;
  for (const Block* n : {hole->prev(), bytes < hole->size ? nullptr : hole->next()}) {
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
  SegmentChain::fill_hole(hole, bytes, rest);  // hole -> rest (still a hole) -> next
  ShardPool& pool = pool_of(hole);
  s->size += bytes;
  total_reserved_ += bytes;
  stats_.reserved_bytes.increase(pool.stat_pool, static_cast<std::int64_t>(bytes));
  if (pool.small) note_small_reserved();
  ++stats_.num_device_alloc;  // PyTorch counts each map as a device allocation
  const std::uint64_t context = delivery_.new_context();
  delivery_.notify(delivery_.slow_lane(), TraceAction::segment_map, hole->addr, bytes, hole->stream, context);
  if (s->context == 0) s->context = context;
  try_merge(hole, hole->prev(), pool);
  try_merge(hole, hole->next(), pool);
  pool.insert_free(hole);
  return hole;
}

template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::unmap_pages(Block* b, std::uintptr_t addr, std::size_t bytes) {
  Segment* s = b->segment;
  ShardPool& pool = pool_of(b);
  const bool has_before = addr > b->addr;
  const bool has_after = addr + bytes < b->addr + b->size;
  BlockTree& tree = *pool.find(b->stream);
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
  // prev -> before (free, mapped) -> b (the hole) -> after (free, mapped) -> next
  SegmentChain::punch_hole(b, addr, bytes, before, after);
  if (before != nullptr) pool.insert_free(before);
  if (after != nullptr) pool.insert_free(after);
  s->size -= bytes;
  total_reserved_ -= bytes;
  stats_.reserved_bytes.decrease(pool.stat_pool, static_cast<std::int64_t>(bytes));
  if (pool.small) note_small_reserved();
  ++stats_.num_device_free;
  delivery_.notify(delivery_.slow_lane(), TraceAction::segment_unmap, addr, bytes, b->stream, s->context);
  try_merge(b, b->prev(), pool);  // holes merge with holes only
  try_merge(b, b->next(), pool);
}

template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::release_all() {
  if (compacting_) {
    for (Segment* s = segment_list_.head(); s != nullptr;) {
      Segment* next = s->list_next;
      if (s->expandable) release_segment(s, /*synced=*/false);
      s = next;
    }
  } else {
    release_pool(large_);
    release_pool(small_);
  }
}

// PyTorch's release_blocks for expandable segments: every free mapped block of the pool, in the
// order of its free set (stream, size, address), gives back its whole pages (one unmap each), and
// a reservation left with nothing mapped goes back too.
template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::release_pool(ShardPool& pool) {
  std::vector<Block*> blocks;
  pool.for_each_tree([&blocks](Stream, BlockTree& tree) {
    for (Block* b = tree.first(); b != nullptr; b = tree.next(b)) {
      if (b->segment->expandable) blocks.push_back(b);
    }
  });
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const Block* x, const Block* y) { return x->stream.id < y->stream.id; });
  std::vector<Stream> synced;
  synced.reserve(blocks.size());
  const std::size_t page = page_of(pool.small);
  for (Block* b : blocks) {
    Segment* s = b->segment;
    const std::uintptr_t lo = s->addr + page_ceil(b->addr - s->addr, page);
    const std::uintptr_t hi = s->addr + page_floor(b->addr + b->size - s->addr, page);
    if (hi > lo) {
      if (std::find(synced.begin(), synced.end(), s->stream) == synced.end()) {
        if constexpr (VirtualMemoryBackend<Backend>) backend_.synchronize_stream(s->stream);
        synced.push_back(s->stream);
      }
      unmap_pages(b, lo, hi - lo);
    }
    if (!s->head->is_split() && !s->head->mapped) release_reservation(s);
  }
}

// Unmaps every free page of expandable segment `s` (synchronizing its stream first, unless
// `synced`), and gives back its reservation once nothing is mapped.
template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::release_segment(Segment* s, bool synced) {
  PlannedSegment view;
  ExpandableState::plan_segment(*s, view);
  unmap_planned(pages_to_release(view, 0, page_of(s->small_pool)), {s},
                synced ? std::vector<Stream>{s->stream} : std::vector<Stream>{});
  if (!s->head->is_split() && !s->head->mapped) release_reservation(s);
}

template <DeviceBackend Backend>
void ExpandableExecutor<Backend>::release_reservation(Segment* s) {
  if constexpr (VirtualMemoryBackend<Backend>) backend_.release(s->reservation);
  segment_list_.unlink(s);
  block_records_.put(SegmentChain::finish(*s));
  segment_list_.recycle(s);
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
