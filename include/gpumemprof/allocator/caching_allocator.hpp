// Layer 2: the caching device allocator, with PyTorch's default policy (PYTORCH-COMPAT.md).
//
// Requests are rounded (size_policy.hpp) and served from one of two pools -- small (<= 1 MiB,
// 2 MiB segments) and large -- by best fit among the free blocks of the *same stream*, ordered
// by (size, address). A block larger than needed is split; a freed block merges with free
// neighbours. When nothing fits, a new segment comes from the device; when the device is full,
// the OOM sequence frees cached memory and retries once before throwing OutOfMemoryError.
// A block used on other streams (record_stream) is reused only after events recorded on those
// streams at free time complete.
//
// With expandable_segments:True (a backend with virtual memory), each (pool, stream) gets an
// address range reserved once (9/8 of the device's memory) and backed page by page
// (the backend's granularity, 2 MiB) as it fills: blocks tile the whole reservation, and a
// block is either mapped (allocated, pending or free) or an unmapped hole. Reserved bytes are
// mapped bytes. When a request does not fit a free mapped block, the run of free and unmapped
// blocks that holds it with the fewest pages to map is mapped; fresh pages are taken while
// reserved stays within 2.5% above the most bytes ever live, and beyond that pages lying wholly
// inside free blocks elsewhere are unmapped first (their stream synchronized) and reused.
// empty_cache() and the OOM sequence unmap every free page.
//
// The hot path (allocate/deallocate of a cached size) takes one mutex, does one tree lookup and
// one hash-table operation each way, and never allocates heap memory; everything else is in
// caching_allocator-inl.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/event_sinks.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/free_index.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/peak_windows.hpp"
#include "gpumemprof/allocator/pointer_map.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct Snapshot;  // history/snapshot.hpp; CachingAllocator::snapshot() is defined in the history layer

/// Values readable at any time without the allocator's lock (relaxed atomics). Each field is
/// exact; the fields are not read at one instant. Byte values in bytes.
struct AllocatorGauges {
  std::int64_t allocated_bytes = 0;       ///< allocated_bytes.all.current
  std::int64_t reserved_bytes = 0;        ///< reserved_bytes.all.current
  std::int64_t active_bytes = 0;          ///< active_bytes.all.current
  std::int64_t inactive_split_bytes = 0;  ///< inactive_split_bytes.all.current
  std::int64_t requested_bytes = 0;       ///< requested_bytes.all.current
  std::int64_t allocations = 0;           ///< allocation.all.current
  // Lifetime totals: never reset (reset_accumulated_memory_stats leaves them alone).
  std::uint64_t total_allocations = 0;
  std::uint64_t total_frees = 0;
  std::uint64_t total_allocated_bytes = 0;
  std::uint64_t total_freed_bytes = 0;
};

template <DeviceBackend Backend>
class CachingAllocator {
 public:
  using backend_type = Backend;
  using OomObserver = std::function<void(const OomInfo&)>;

  /// An allocator over `backend`, configured by `config` (default: $GPUMEMPROF_ALLOC_CONF).
  explicit CachingAllocator(Backend backend, AllocatorConfig config = AllocatorConfig::from_env());
  /// Returns every segment to the device. Pointers still allocated become invalid.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// `bytes` of device memory for work on `stream`; nullptr for 0 bytes.
  /// Throws OutOfMemoryError when the device cannot provide it even after freeing the cache.
  [[nodiscard]] void* allocate(std::size_t bytes, Stream stream = {});

  /// Returns memory from allocate(). nullptr is ignored. A pointer this allocator did not hand
  /// out (or already took back) throws InvalidPointerError and changes nothing.
  void deallocate(void* ptr);

  /// Marks `ptr` as used by work on `stream`: after deallocate() the block is reused only once
  /// that stream's work queued so far has completed. No-op for the block's own stream.
  void record_stream(void* ptr, Stream stream);

  /// Waits for outstanding cross-stream events and returns every fully free segment to the device.
  void empty_cache();

  [[nodiscard]] MemoryStats memory_stats() const;
  void reset_peak_memory_stats();
  void reset_accumulated_memory_stats();

  /// Caps reserved memory at `fraction` of the device's total memory (0..1).
  void set_memory_fraction(double fraction);

  /// PyTorch-schema snapshot of segments, blocks and the recorded history: the same as
  /// gmp::snapshot(*this), defined in gpumemprof/history/snapshot_builder.hpp (included by
  /// gpumemprof.hpp).
  [[nodiscard]] Snapshot snapshot() const;

  /// Checks every invariant (block tiling, indexes, stats recount); throws std::logic_error
  /// naming the first broken one.
  void validate() const;

  /// Lock-free readings for samplers and profilers.
  [[nodiscard]] AllocatorGauges gauges() const noexcept;

  /// Per-interval peaks of allocated bytes (see peak_windows.hpp); the global peak is untouched.
  [[nodiscard]] std::uint64_t open_peak_window();
  /// The peak (bytes) since the window opened; closes it.
  std::int64_t close_peak_window(std::uint64_t id);
  /// The peak (bytes) since the window opened; keeps it open.
  [[nodiscard]] std::int64_t peak_window(std::uint64_t id) const;

  /// Adds a sink of every allocator event (event_sinks.hpp); returns its slot. Not owned: remove
  /// it before it goes away. Throws std::length_error when all slots are taken.
  std::size_t add_event_sink(const AllocatorEventSink& sink);
  /// Removes the sink in `slot`; once this returns, the sink is not called again.
  void remove_event_sink(std::size_t slot);
  /// Number of event sinks attached now.
  [[nodiscard]] std::size_t event_sink_count() const;
  /// Called (outside the lock) before OutOfMemoryError is thrown.
  void attach_oom_observer(OomObserver observer);

  /// Every segment with its blocks, in creation order. An expandable segment shows as one
  /// segment per run of mapped pages (as in PyTorch's snapshots), unmapped holes left out.
  [[nodiscard]] std::vector<SegmentView> segments() const;
  /// Visits the segments under the allocator's lock; `f(const SegmentView&)` must not call back.
  template <class F>
  void visit_segments(F&& f) const;

  /// A consistent view of the allocator, valid only inside with_lock().
  class LockedView {
   public:
    /// Visits every segment, in creation order.
    template <class F>
    void visit_segments(F&& f) const {
      for (const Segment* s = a_.segments_head_; s != nullptr; s = s->list_next) a_.for_each_view(*s, f);
    }
    [[nodiscard]] const MemoryStats& stats() const noexcept { return a_.stats_; }

   private:
    friend class CachingAllocator;
    explicit LockedView(const CachingAllocator& a) : a_(a) {}
    const CachingAllocator& a_;
  };
  /// Runs `f(const LockedView&)` under the allocator's lock and returns its result: no allocator
  /// event happens meanwhile. `f` must not call the allocator (it would deadlock).
  template <class F>
  decltype(auto) with_lock(F&& f) const {
    std::lock_guard lock(mutex_);
    return std::forward<F>(f)(LockedView(*this));
  }

  /// The device's own account (cudaMemGetInfo), including memory this allocator does not own.
  [[nodiscard]] MemInfo mem_get_info() const { return backend_.mem_get_info(); }
  [[nodiscard]] const AllocatorConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] Backend& backend() noexcept { return backend_; }
  [[nodiscard]] const Backend& backend() const noexcept { return backend_; }
  [[nodiscard]] int device_index() const { return backend_.index(); }
  [[nodiscard]] std::string device_name() const { return backend_.name(); }

 private:
  using Block = detail::Block;
  using Segment = detail::Segment;
  using Tree = detail::FreeIndex<Block>;

  struct Pool {
    bool small = false;
    StatPool stat_pool = StatPool::large_pool;
    std::size_t exact_limit = 0;                 // FreeIndex bins cover sizes up to this
    std::vector<std::pair<Stream, Tree>> trees;  // one per stream; few streams, so a vector
    std::uint64_t free_lookups = 0;              // PyTorch's get_free_blocks_call_count (GC ages)

    Tree* find(Stream s) noexcept {
      for (auto& [stream, tree] : trees) {
        if (stream == s) return &tree;
      }
      return nullptr;
    }
    Tree& at(Stream s) {
      if (Tree* t = find(s)) return *t;
      trees.emplace_back(s, Tree(exact_limit));
      return trees.back().second;
    }
  };

  struct PendingEvent {
    Event event;
    Block* block;
  };
  struct StreamEvents {
    Stream stream;
    std::deque<PendingEvent> queue;  // in recording order
  };

  // --- hot path helpers ---
  [[nodiscard]] std::size_t round(std::size_t bytes) const noexcept {
    if (GPUMEMPROF_LIKELY(!has_roundup_)) {
      return bytes < kMinBlockSize ? kMinBlockSize : (bytes + kMinBlockSize - 1) & ~(kMinBlockSize - 1);
    }
    return round_size(bytes, cfg_);
  }
  Pool& pool_of(const Block* b) noexcept { return b->small_pool ? small_ : large_; }
  Block* take_free_block(Pool& pool, Stream stream, std::size_t size);
  Block* hand_out(Pool& pool, Block* block, std::size_t size, std::size_t requested);
  void insert_free(Pool& pool, Block* b);
  void free_block(Block* b, bool deferred = false);
  std::size_t try_merge(Block* dst, Block* src, Pool& pool);
  void stat_add(StatArray& s, StatPool p, std::int64_t n) noexcept {
    s[StatPool::all].increase(n);
    s[p].increase(n);
  }
  void stat_sub(StatArray& s, StatPool p, std::int64_t n) noexcept {
    s[StatPool::all].decrease(n);
    s[p].decrease(n);
  }
  void publish() noexcept;
  // The gauges one allocation or free can change (the slow paths publish() them all).
  void publish_use() noexcept {
    constexpr auto r = std::memory_order_relaxed;
    mirror_.allocated_bytes.store(stats_.allocated_bytes[StatPool::all].current, r);
    mirror_.active_bytes.store(stats_.active_bytes[StatPool::all].current, r);
    mirror_.inactive_split_bytes.store(stats_.inactive_split_bytes[StatPool::all].current, r);
    mirror_.requested_bytes.store(stats_.requested_bytes[StatPool::all].current, r);
    mirror_.allocations.store(stats_.allocation[StatPool::all].current, r);
  }
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t n) noexcept {
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void debug_validate() const {
#if GPUMEMPROF_DEBUG_VALIDATE
    validate_locked();
#endif
  }

  // --- slow paths (caching_allocator-inl.hpp) ---
  GPUMEMPROF_NOINLINE Block* allocate_slow(Pool& pool, Stream stream, std::size_t size, std::size_t requested,
                                           std::unique_lock<std::mutex>& lock);
  Block* new_segment(Pool& pool, Stream stream, std::size_t segment_bytes, bool is_retry);
  // Expandable segments (caching_allocator-inl.hpp).
  Block* grow_expandable(Pool& pool, Stream stream, std::size_t size, bool is_retry);
  Block* find_expandable_run(const Pool& pool, Stream stream, std::size_t size) const;
  Block* new_reservation(Pool& pool, Stream stream);
  Block* map_block(Block* unmapped, std::size_t bytes);
  void unmap_pages(Block* free_block, std::uintptr_t addr, std::size_t bytes);
  std::size_t recycle_pages(std::size_t wanted, std::uintptr_t keep_begin, std::uintptr_t keep_end);
  std::size_t pages_to_recycle(std::size_t size, std::size_t need);
  void release_expandable();
  void release_reservation(Segment* s);
  void unlink_segment(Segment* s);
  void link_segment(Segment* s);
  [[nodiscard]] std::size_t span_of(const Segment& s) const noexcept {
    return s.expandable ? s.reservation.size : s.size;
  }
  template <class F>
  void for_each_view(const Segment& s, F&& f) const;
  void release_segment(Block* whole);
  bool release_available_cached_blocks(Pool& pool, Stream stream, std::size_t size);
  void release_cached_blocks();
  void release_pool(Pool& pool);
  void garbage_collect_cached_blocks();
  GPUMEMPROF_NOINLINE void process_events();
  void insert_events(Block* b);
  void synchronize_and_free_events();
  [[noreturn]] void throw_invalid_pointer(const void* ptr, const char* what) const;
  [[noreturn]] void throw_oom(Pool& pool, Stream stream, std::size_t size, std::size_t requested,
                              std::unique_lock<std::mutex>& lock);
  std::uint64_t notify(TraceAction action, std::uintptr_t addr, std::size_t size, Stream stream,
                       std::uint64_t context = 0, bool deferred = false) {
    if (GPUMEMPROF_LIKELY(sinks_.count() == 0)) return 0;
    return sinks_.emit({action, addr, size, stream, context, deferred});
  }
  void validate_locked() const;
  static BlockView view_of(const Block& b);

  Backend backend_;
  AllocatorConfig cfg_;
  bool has_roundup_ = false;  // any roundup_power2_divisions > 1 configured
  bool gc_active_ = false;    // memory fraction and garbage_collection_threshold both set
  bool expandable_ = false;   // expandable_segments:True on a backend with virtual memory
  std::size_t page_ = 0;      // the backend's mapping granularity (expandable only)
  // Expandable growth maps fresh pages, not recycled ones, while reserved stays within this
  // fraction above the most bytes ever live (live_high_): see pages_to_recycle. The goal is
  // <= 1.03x peak requested and <= PyTorch's expandable figure (1.0255x on resnet50_train).
  static constexpr double kExpandableSlack = 0.025;
  std::size_t live_high_ = 0;

  mutable std::mutex mutex_;
  Pool small_;
  Pool large_;
  detail::PointerMap<Block> ptrs_;  // allocated blocks by address
  detail::ObjectPool<Block> block_records_;
  detail::ObjectPool<Segment> segment_records_;
  Segment* segments_head_ = nullptr;  // all segments, creation order
  Segment* segments_tail_ = nullptr;
  std::vector<StreamEvents> events_;
  std::size_t pending_events_ = 0;
  std::size_t total_reserved_ = 0;          // bytes held from the device
  std::optional<std::size_t> allowed_max_;  // set_memory_fraction
  MemoryStats stats_;
  detail::PeakWindows windows_;
  detail::EventSinks sinks_;
  std::vector<OomObserver> oom_observers_;

  // Mirrors of a few stats for lock-free readers (gauges()); the lifetime totals live only here
  // (written under the lock, so a relaxed load + store is an exact increment).
  struct Mirror {
    std::atomic<std::int64_t> allocated_bytes{0}, reserved_bytes{0}, active_bytes{0}, inactive_split_bytes{0},
        requested_bytes{0}, allocations{0};
    std::atomic<std::uint64_t> total_allocations{0}, total_frees{0}, total_allocated_bytes{0}, total_freed_bytes{0};
  } mirror_;
};

// ------------------------------------------------------------------------------------------------
// Hot path

template <DeviceBackend Backend>
void* CachingAllocator<Backend>::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return nullptr;
  std::unique_lock lock(mutex_);
  if (GPUMEMPROF_UNLIKELY(pending_events_ != 0)) process_events();
  const std::size_t size = round(bytes);
  Pool& pool = is_small_size(size) ? small_ : large_;
  Block* block = take_free_block(pool, stream, size);
  if (GPUMEMPROF_UNLIKELY(block == nullptr)) block = allocate_slow(pool, stream, size, bytes, lock);
  block = hand_out(pool, block, size, bytes);
  debug_validate();
  return reinterpret_cast<void*>(block->addr);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  Block* b = ptrs_.erase(reinterpret_cast<std::uintptr_t>(ptr));
  if (GPUMEMPROF_UNLIKELY(b == nullptr)) throw_invalid_pointer(ptr, "deallocate");
  b->allocated = false;
  const StatPool sp = pool_of(b).stat_pool;
  const auto size = static_cast<std::int64_t>(b->size);
  stat_sub(stats_.allocation, sp, 1);
  stat_sub(stats_.allocated_bytes, sp, size);
  if (b->size >= cfg_.max_split_size) stats_.oversize_allocations.decrease(1);
  bump(mirror_.total_frees, 1);
  bump(mirror_.total_freed_bytes, b->size);
  notify(TraceAction::free_requested, b->addr, b->requested, b->stream, b->context);
  if (GPUMEMPROF_UNLIKELY(b->stream_uses != nullptr && !b->stream_uses->empty())) {
    insert_events(b);
  } else {
    free_block(b);
  }
  publish_use();
  debug_validate();
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::take_free_block(Pool& pool, Stream stream,
                                                                                      std::size_t size) {
  if (GPUMEMPROF_UNLIKELY(gc_active_)) ++pool.free_lookups;
  Tree* tree = pool.find(stream);
  if (tree == nullptr) return nullptr;
  Block* b = tree->lower_bound(size);
  if (b == nullptr) return nullptr;
  const std::size_t max_split = cfg_.max_split_size;
  // An oversize block is never handed to a small request, and a large request only takes a
  // block that wastes less than max_non_split_rounding_size (these blocks are never split).
  if (size < max_split && b->size >= max_split) return nullptr;
  if (size >= max_split && b->size - size >= cfg_.max_non_split_rounding_size) return nullptr;
  tree->erase(b);
  return b;
}

template <DeviceBackend Backend>
typename CachingAllocator<Backend>::Block* CachingAllocator<Backend>::hand_out(Pool& pool, Block* block,
                                                                               std::size_t size,
                                                                               std::size_t requested) {
  const StatPool sp = pool.stat_pool;
  const bool already_split = block->is_split();
  if (should_split(block->size, size, pool.small, cfg_)) {
    // The front of the block is handed out; the remainder keeps the old record and stays free.
    Block* rest = block;
    block = block_records_.get();
    block->addr = rest->addr;
    block->size = size;
    block->stream = rest->stream;
    block->segment = rest->segment;
    block->small_pool = rest->small_pool;
    block->mapped = rest->mapped;
    block->prev = rest->prev;
    if (block->prev != nullptr) {
      block->prev->next = block;
    } else {
      block->segment->head = block;
    }
    block->next = rest;
    rest->prev = block;
    rest->addr += size;
    rest->size -= size;
    insert_free(pool, rest);
    if (!block->segment->expandable) {
      if (already_split) {
        stat_sub(stats_.inactive_split_bytes, sp, static_cast<std::int64_t>(size));
      } else {
        stat_add(stats_.inactive_split_bytes, sp, static_cast<std::int64_t>(rest->size));
        stat_add(stats_.inactive_split, sp, 1);
      }
    }
  } else if (already_split && !block->segment->expandable) {
    stat_sub(stats_.inactive_split_bytes, sp, static_cast<std::int64_t>(block->size));
    stat_sub(stats_.inactive_split, sp, 1);
  }
  block->allocated = true;
  block->requested = requested;
  ptrs_.insert(block->addr, block);
  const auto bytes = static_cast<std::int64_t>(block->size);
  stat_add(stats_.allocation, sp, 1);
  stat_add(stats_.allocated_bytes, sp, bytes);
  stat_add(stats_.active, sp, 1);
  stat_add(stats_.active_bytes, sp, bytes);
  stat_add(stats_.requested_bytes, sp, static_cast<std::int64_t>(requested));
  if (block->size >= cfg_.max_split_size) stats_.oversize_allocations.increase(1);
  windows_.on_value(stats_.allocated_bytes[StatPool::all].current);
  bump(mirror_.total_allocations, 1);
  bump(mirror_.total_allocated_bytes, block->size);
  block->context = notify(TraceAction::alloc, block->addr, requested, block->stream);
  publish_use();
  return block;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::insert_free(Pool& pool, Block* b) {
  b->gc_base = pool.free_lookups;
  pool.at(b->stream).insert(b);
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::free_block(Block* b, bool deferred) {
  notify(TraceAction::free_completed, b->addr, b->requested, b->stream, b->context, deferred);
  Pool& pool = pool_of(b);
  const StatPool sp = pool.stat_pool;
  const auto original_size = static_cast<std::int64_t>(b->size);
  const auto requested = static_cast<std::int64_t>(b->requested);
  std::int64_t inactive_blocks = 0;
  std::int64_t inactive_bytes = 0;
  for (Block* neighbour : {b->prev, b->next}) {
    if (const std::size_t subsumed = try_merge(b, neighbour, pool); subsumed != 0) {
      inactive_blocks -= 1;
      inactive_bytes -= static_cast<std::int64_t>(subsumed);
    }
  }
  b->requested = 0;
  b->context = 0;
  insert_free(pool, b);
  if (b->is_split()) {
    inactive_blocks += 1;
    inactive_bytes += static_cast<std::int64_t>(b->size);
  }
  if (!b->segment->expandable) {
    if (inactive_blocks > 0) stat_add(stats_.inactive_split, sp, inactive_blocks);
    if (inactive_blocks < 0) stat_sub(stats_.inactive_split, sp, -inactive_blocks);
    if (inactive_bytes > 0) stat_add(stats_.inactive_split_bytes, sp, inactive_bytes);
    if (inactive_bytes < 0) stat_sub(stats_.inactive_split_bytes, sp, -inactive_bytes);
  }
  stat_sub(stats_.active, sp, 1);
  stat_sub(stats_.active_bytes, sp, original_size);
  stat_sub(stats_.requested_bytes, sp, requested);
}

template <DeviceBackend Backend>
std::size_t CachingAllocator<Backend>::try_merge(Block* dst, Block* src, Pool& pool) {
  if (src == nullptr || !src->is_free() || src->mapped != dst->mapped) return 0;
  if (src->mapped) pool.find(src->stream)->erase(src);  // unmapped holes are in no tree
  if (dst->prev == src) {                               // [src dst]
    dst->addr = src->addr;
    dst->prev = src->prev;
    if (dst->prev != nullptr) {
      dst->prev->next = dst;
    } else {
      dst->segment->head = dst;
    }
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  const std::size_t subsumed = src->size;
  dst->size += subsumed;
  block_records_.put(src);
  return subsumed;
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::publish() noexcept {
  publish_use();
  mirror_.reserved_bytes.store(stats_.reserved_bytes[StatPool::all].current, std::memory_order_relaxed);
}

template <DeviceBackend Backend>
AllocatorGauges CachingAllocator<Backend>::gauges() const noexcept {
  constexpr auto r = std::memory_order_relaxed;
  AllocatorGauges g;
  g.allocated_bytes = mirror_.allocated_bytes.load(r);
  g.reserved_bytes = mirror_.reserved_bytes.load(r);
  g.active_bytes = mirror_.active_bytes.load(r);
  g.inactive_split_bytes = mirror_.inactive_split_bytes.load(r);
  g.requested_bytes = mirror_.requested_bytes.load(r);
  g.allocations = mirror_.allocations.load(r);
  g.total_allocations = mirror_.total_allocations.load(r);
  g.total_frees = mirror_.total_frees.load(r);
  g.total_allocated_bytes = mirror_.total_allocated_bytes.load(r);
  g.total_freed_bytes = mirror_.total_freed_bytes.load(r);
  return g;
}

template <DeviceBackend Backend>
template <class F>
void CachingAllocator<Backend>::visit_segments(F&& f) const {
  with_lock([&f](const LockedView& v) { v.visit_segments(f); });
}

GPUMEMPROF_NAMESPACE_END

#include "gpumemprof/allocator/caching_allocator-inl.hpp"
