// Layer 2: CachingAllocator's private pools (MemPool, CUDA graph pools) and stream capture.
// Included by caching_allocator.hpp; not a header to include on its own.
//
// How capture stays legal (c10's CUDACachingAllocator does the same, and docs/pools-and-graphs.md
// says it for users):
// - While any route to a private pool is active (begin_allocate_to_pool), allocations take the
//   slow path (the hot path's one test of pending_events_ sees the route), the routed ones are
//   served from the pool's own segments, and no event is queried (process_events waits).
// - A new segment's malloc and a segment's free run in relaxed capture mode, so that another
//   thread's capture in global mode does not forbid them.
// - A block used on other streams (record_stream) and freed while capture may be under way gets
//   no event then (an event recorded in a capture cannot be queried): its free is deferred until
//   no capture is under way (flush_deferred, from process_events). Then, as c10 does, the streams
//   recorded while a route was active get no event (their work was part of the graph): a block
//   used only on such streams is free at once. A block without other-stream uses is free at once,
//   inside the capture too: the capture's later allocations on its stream reuse it.
// - empty_cache and the OOM sequence's wait-and-free-everything step do nothing during capture.
// - A private pool's memory goes back to the device only once the pool has no user left.
#pragma once

#include <stdexcept>
#include <string>

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {
inline std::string pool_name(MempoolId id) {
  return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")";
}
}  // namespace detail

template <DeviceBackend Backend>
void CachingAllocator<Backend>::create_pool(MempoolId id, MemPoolOptions options) {
  if (id.is_default()) throw std::invalid_argument("create_pool: (0, 0) is the default pool; pass a pool id");
  ExclusiveLock lock(*this);
  ++pools_.at(pools_.find_or_create(id, options)).use_count;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::begin_allocate_to_pool(MempoolId id, std::function<bool(Stream)> filter) {
  if (id.is_default())
    throw std::invalid_argument("begin_allocate_to_pool: (0, 0) is the default pool; pass a pool id");
  ExclusiveLock lock(*this);
  const std::uint32_t index = pools_.find_or_create(id, {});
  try {
    pools_.add_route(id, index, std::move(filter));
  } catch (...) {
    pools_.forget_if_unused(index);
    throw;
  }
  ++pools_.at(index).use_count;
  pending_events_ += kRouteUnit;  // from now on every allocation takes the slow path
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::end_allocate_to_pool(MempoolId id) {
  ExclusiveLock lock(*this);
  if (!pools_.remove_route(id)) {
    throw std::invalid_argument("end_allocate_to_pool: no allocations are routed to pool " + detail::pool_name(id) +
                                " on " + backend_.name() + "; call begin_allocate_to_pool first");
  }
  pending_events_ -= kRouteUnit;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_pool(MempoolId id) {
  EventCall events(*this, TraceAction::segment_free);
  {
    ExclusiveLock lock(*this);
    const std::uint32_t index = pools_.find(id);
    if (index == 0 || pools_.at(index).use_count <= 0) {
      throw std::invalid_argument("release_pool: pool " + detail::pool_name(id) + " has no user on " + backend_.name() +
                                  "; release each pool once per create_pool or begin_allocate_to_pool");
    }
    if (--pools_.at(index).use_count == 0) release_unused_pool(index);
  }
  debug_validate();
}

// A pool without users: its whole free segments go back now (unless a capture may be under way:
// then at the next empty_cache, OOM or free of its blocks); the rest as their blocks are freed.
template <DeviceBackend Backend>
void CachingAllocator<Backend>::release_unused_pool(std::uint32_t index) {
  if (!any_capturing()) {
    std::vector<Block*> whole;
    for (Pool* pool : {&large_, &small_}) {
      pool->for_each_pool_tree([&whole, index](std::uint32_t p, Stream, Tree& tree) {
        if (p != index) return;
        for (Block* b = tree.first(); b != nullptr; b = tree.next(b)) {
          if (!b->is_split()) whole.push_back(b);
        }
      });
    }
    for (Block* b : whole) release_segment(b);
  }
  pools_.forget_if_unused(index);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reclaim_released(Block* b) {
  if (pools_.held(b->pool) || b->is_split() || !b->is_free() || capturing(b->stream)) return;
  release_segment(b);
}

template <DeviceBackend Backend>
bool CachingAllocator<Backend>::capturing(Stream s) {
  if (pools_.routing()) return true;
  if constexpr (CaptureAwareBackend<Backend>) {
    return backend_.is_capturing(s);
  } else {
    (void)s;
    return false;
  }
}

template <DeviceBackend Backend>
bool CachingAllocator<Backend>::any_capturing() {
  if (pools_.routing()) return true;
  if constexpr (CaptureAwareBackend<Backend>) {
    // The streams of segments holding memory the user still has (an allocated block): a stream
    // the user destroyed may still name cached segments and event queues, and asking CUDA about a
    // destroyed stream is undefined (it crashed test_multistream on the GPU host).
    std::vector<Stream> seen;
    auto check = [this, &seen](Stream s) {
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) return false;
      seen.push_back(s);
      return backend_.is_capturing(s);
    };
    auto holds_allocated = [](const Segment* seg) {
      for (const Block* b = seg->head; b != nullptr; b = b->next()) {
        if (b->allocated) return true;
      }
      return false;
    };
    for (Segment* s = segment_list_.head(); s != nullptr; s = s->list_next) {
      if (holds_allocated(s) && check(s->stream)) return true;
    }
  }
  return false;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::borrow_on_oom(Pool& pool, Stream stream,
                                                                                    std::size_t size) {
  Block* found = nullptr;
  pools_.for_each_use_on_oom([&](std::uint32_t index) {
    if (found != nullptr) return;
    if (Tree* tree = pool.find(stream, index); tree != nullptr) found = find_free_block(*tree, pool, size);
  });
  return found;
}

template <DeviceBackend Backend>
bool CachingAllocator<Backend>::defer_while_capturing(Block* b) {
  bool capture = capturing(b->stream);
  for (std::size_t i = 0; !capture && i < b->stream_uses->size(); ++i) capture = capturing((*b->stream_uses)[i]);
  if (!capture) {
    pools_.forget_capture_uses(b->addr);  // freed now with events on every use, as in c10
    return false;
  }
  cross_stream_.reserve_deferred();  // what may throw, first
  b->event_count = 1;                // pending free, held by the deferral
  ++pending_events_;
  cross_stream_.defer(b);
  return true;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::flush_deferred() {
  for (std::size_t i = 0; i < cross_stream_.deferred().size();) {
    Block* b = cross_stream_.deferred()[i];
    bool capture = capturing(b->stream);
    for (std::size_t j = 0; !capture && j < b->stream_uses->size(); ++j) capture = capturing((*b->stream_uses)[j]);
    if (capture) {
      ++i;
      continue;
    }
    // The streams recorded during a capture ran graph work, which the capture's end ordered
    // before anything later: no event on them (c10's remove_cudagraph_stream_uses).
    pools_.drop_capture_uses(b->addr, *b->stream_uses);
    if (b->stream_uses->empty()) {  // no use left (capture-time, or release_stream took it): free now
      reserve_free(pool_of(b).at(b->stream, b->pool), b);
      b->event_count = 0;
      --pending_events_;
      cross_stream_.undefer(i);
      free_block_exclusive(b);
      continue;
    }
    insert_events(b);  // may throw: then b stays deferred, unchanged
    --b->event_count;  // the deferral's hold; the events recorded now hold it instead
    --pending_events_;
    cross_stream_.undefer(i);
  }
}

template <DeviceBackend Backend>
PoolStats CachingAllocator<Backend>::pool_stats_locked(std::uint32_t index) const {
  const auto& e = pools_.at(index);
  PoolStats st;
  st.id = e.id;
  st.use_count = e.use_count;
  for (const Segment* s = segment_list_.head(); s != nullptr; s = s->list_next) {
    if (s->pool != index) continue;
    ++st.segments;
    st.reserved_bytes += static_cast<std::int64_t>(s->size);
    for (const Block* b = s->head; b != nullptr; b = b->next()) {
      if (b->allocated) {
        ++st.allocations;
        st.allocated_bytes += static_cast<std::int64_t>(b->size);
      }
      if (!b->is_free()) {
        st.active_bytes += static_cast<std::int64_t>(b->size);
        st.requested_bytes += static_cast<std::int64_t>(b->requested);
      }
    }
  }
  return st;
}

template <DeviceBackend Backend>
std::optional<PoolStats> CachingAllocator<Backend>::pool_stats(MempoolId id) const {
  ExclusiveLock lock(*this);
  const std::uint32_t index = pools_.find(id);
  if (index == 0) return std::nullopt;
  return pool_stats_locked(index);
}

template <DeviceBackend Backend>
std::vector<PoolStats> CachingAllocator<Backend>::all_pool_stats() const {
  ExclusiveLock lock(*this);
  std::vector<PoolStats> out;
  for (std::uint32_t i = 1; i < pools_.size(); ++i) {
    if (pools_.at(i).live) out.push_back(pool_stats_locked(i));
  }
  return out;
}

GPUMEMPROF_NAMESPACE_END
