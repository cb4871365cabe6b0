// Layer 2: the expandable segments' executor -- carries out expandable_planner.hpp's plans on the
// caching allocator's blocks, free trees, statistics and device: new reservations, mapping holes,
// unmapping free pages, giving reservations back -- and owns what the plans need between growths
// (ExpandableState: the pages, the high-water mark of live bytes, the planner's view).
//
// Each step changes several of the allocator's parts at once, so the allocator lends them at
// construction (Parts), and no more: the segment list, the block records, the two pools' trees,
// the reserved bytes, the memory fraction's cap, the statistics, the event lanes and the backend.
// The executor never sees the rest of the allocator (its shards' locks, the pointer map, the
// cross-stream events, private pools).
//
// Locks. Every step runs inside the allocator's exclusive section: its device mutex (which
// guards the lent parts and this part's own state) and its ledger's stats lock (which guards the
// statistics). The executor names the two locks as `device_` and `stats_lock_`, references to the
// allocator's; the allocator's exclusive lock takes them under both names (device_lock(),
// stats_lock()), so clang's thread-safety analysis checks each call and each field against them.
//
// Invariants (the allocator's validate() checks them): an expandable segment's blocks tile its
// whole reservation; holes (unmapped blocks) start and end on page boundaries, are free, in no
// tree, and never neighbour another hole; Segment::size is its mapped bytes, and the reserved
// bytes and reserved_bytes count mapped bytes. Every step first does what may throw (records,
// room in a tree), then changes the state without throwing, so a failure leaves nothing behind.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/event_delivery.hpp"
#include "gpumemprof/allocator/expandable_layout.hpp"
#include "gpumemprof/allocator/expandable_state.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/segment_list.hpp"
#include "gpumemprof/allocator/shard_registry.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/spin_lock.hpp"
#include "gpumemprof/detail/thread_annotations.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

// A step: holds the allocator's device mutex and stats lock.
#define GPUMEMPROF_EXECUTES GPUMEMPROF_REQUIRES(device_, stats_lock_)

template <DeviceBackend Backend>
class ExpandableExecutor {
 public:
  /// The allocator's parts that the steps change, lent for the allocator's lifetime.
  struct Parts {
    Backend& backend;
    const AllocatorConfig& config;
    SegmentList& segments;  // under the device mutex
    BlockRecords& records;  // the slow paths' block records; under the device mutex
    ShardPool& small;       // the pools' trees: of the shards, held in the exclusive section
    ShardPool& large;
    std::size_t& reserved;                          // bytes held from the device; under the device mutex
    const std::optional<std::size_t>& allowed_max;  // set_memory_fraction's cap; under the device mutex
    MemoryStats& stats;                             // under the stats lock
    const EventDelivery& delivery;                  // the slow lane: under the device mutex
  };

  /// An executor of the allocator whose device mutex is `device` and stats lock `stats_lock`;
  /// inactive (no expandable segments) until configure().
  ExpandableExecutor(Mutex& device, SpinLock& stats_lock, const Parts& parts) noexcept;
  ExpandableExecutor(const ExpandableExecutor&) = delete;
  ExpandableExecutor& operator=(const ExpandableExecutor&) = delete;

  /// Expandable segments of pages `page` (the device's mapping granularity): PyTorch's policy, or
  /// with `compacting` gpumemprof's (expandable_state.hpp). Called by the allocator's constructor.
  void configure(std::size_t page, bool compacting) GPUMEMPROF_REQUIRES(device_);

  /// The allocator's device mutex and stats lock, under this part's names (the same locks).
  [[nodiscard]] Mutex& device_lock() const noexcept GPUMEMPROF_RETURN_CAPABILITY(device_) { return device_; }
  [[nodiscard]] SpinLock& stats_lock() const noexcept GPUMEMPROF_RETURN_CAPABILITY(stats_lock_) { return stats_lock_; }

  /// The pages mapped in the small or the large pool.
  [[nodiscard]] std::size_t page_of(bool small_pool) const noexcept GPUMEMPROF_REQUIRES(device_);

  /// A free block of `pool` on `stream` that holds `size` bytes, made by mapping pages under the
  /// policy (a new reservation when the stream has none with room); null when the device cannot
  /// map them. The block stays in its tree: the allocator hands it out. `is_retry`: the second
  /// attempt, after the cache was emptied (counted in num_alloc_retries).
  Block* grow(ShardPool& pool, Stream stream, std::size_t size, bool is_retry) GPUMEMPROF_EXECUTES;

  /// empty_cache's share: unmaps every free page (PyTorch's release_blocks order, or with the
  /// compacting policy segment by segment) and gives back reservations left with nothing mapped.
  void release_all() GPUMEMPROF_EXECUTES;

  /// Unmaps every free page of expandable segment `s` (synchronizing its stream first, unless
  /// `synced`), and gives back its reservation once nothing is mapped.
  void release_segment(Segment* s, bool synced) GPUMEMPROF_EXECUTES;

  /// PyTorch's best fit among free expandable blocks (get_free_block): from `b`, the smallest
  /// block of `tree` that holds the request, on to the next while its size plus the unmapped hole
  /// after it is smaller. The hot path's; no state.
  static Block* best_fit(const BlockTree& tree, Block* b) noexcept {
    const auto hole_after = [](const Block* x) noexcept {
      return x->next() != nullptr && !x->next()->mapped ? x->next()->size : 0;
    };
    // Only a block followed by an unmapped hole can be passed over: the next block in the tree is
    // no smaller, so it reaches at least as far as one without a hole. Most blocks have none, and
    // then the tree is not walked at all (the walk costs a successor search).
    for (std::size_t hole = hole_after(b); hole != 0; hole = hole_after(b)) {
      Block* n = tree.next(b);
      if (n == nullptr || n->size + hole_after(n) >= b->size + hole) break;
      b = n;
    }
    return b;
  }

  /// The compacting policy's spill: the free large block (of `large`, the stream's large-pool
  /// tree, or null) that a small request its own pool cannot serve takes instead of mapping a
  /// page -- the best fit -- or null: none holds it, max_split_size is set (its oversize blocks
  /// are never split for small requests), or the small pool has no page mapped yet. The first
  /// small page is mapped, not spilled: a warm replay finds the small pool's pages mapped (and
  /// free) from the start, so the cold one places its first small requests there too, and the
  /// large pool's free blocks are the same in both (gpt2_generate: 2 warm maps -> 0). The one rule
  /// for the hot path (without the device lock) and for grow().
  [[nodiscard]] Block* spill_block(const BlockTree* large, std::size_t size) const noexcept {
    if (cfg_.max_split_size != AllocatorConfig::unlimited || large == nullptr) return nullptr;
    if (!small_pool_mapped_.load(std::memory_order_relaxed)) return nullptr;
    return large->lower_bound(size);  // stays in its tree: hand_out takes it
  }

 private:
  Block* grow_compacting(ShardPool& pool, Stream stream, std::size_t size) GPUMEMPROF_EXECUTES;
  // Maps the planned holes of the growth at `place` (a new reservation when null), and returns
  // the free block that holds the request; null when the device cannot map them.
  Block* map_growth(ShardPool& pool, Stream stream, std::size_t size, const GrowthPlace* place,
                    bool may_recycle) GPUMEMPROF_EXECUTES;
  // The bytes of free pages the compacting policy moves for a growth that needs `need` bytes.
  std::size_t pages_to_recycle(std::size_t size, std::size_t need) GPUMEMPROF_EXECUTES;
  ExpandableLayout& refresh_layout() GPUMEMPROF_REQUIRES(device_);  // the planner's view, afresh
  Block* new_reservation(ShardPool& pool, Stream stream) GPUMEMPROF_REQUIRES(device_);
  Block* map_block(Block* hole, std::size_t bytes) GPUMEMPROF_EXECUTES;
  void unmap_pages(Block* free_block, std::uintptr_t addr, std::size_t bytes) GPUMEMPROF_EXECUTES;
  // After the small pool's reserved bytes changed: whether it has any mapped (spill_block).
  void note_small_reserved() GPUMEMPROF_EXECUTES {
    small_pool_mapped_.store(stats_.reserved_bytes[StatPool::small_pool].current > 0, std::memory_order_relaxed);
  }
  void unmap_planned(const std::vector<UnmapStep>& steps, const std::vector<Segment*>& segs,
                     std::vector<Stream> synced) GPUMEMPROF_EXECUTES;
  void release_pool(ShardPool& pool) GPUMEMPROF_EXECUTES;  // PyTorch's release_blocks
  void release_reservation(Segment* s) GPUMEMPROF_REQUIRES(device_);
  // Merges `src` into `dst` when free and mapped alike (the slow paths' records).
  std::size_t try_merge(Block* dst, Block* src, ShardPool& pool) GPUMEMPROF_REQUIRES(device_);
  [[nodiscard]] ShardPool& pool_of(const Block* b) const noexcept { return b->small_pool ? small_ : large_; }
  static Block* block_at(const Segment& s, std::uintptr_t addr) noexcept;  // the block holding addr

  Mutex& device_;
  SpinLock& stats_lock_;
  ExpandableState state_ GPUMEMPROF_GUARDED_BY(device_);
  bool compacting_ GPUMEMPROF_GUARDED_BY(device_) = false;
  // Lent by the allocator (Parts).
  Backend& backend_;
  const AllocatorConfig& cfg_;
  // Whether the small pool has bytes mapped (spill_block): written with the device lock held (map
  // and unmap), read on the hot path without it.
  std::atomic<bool> small_pool_mapped_{false};
  SegmentList& segment_list_ GPUMEMPROF_GUARDED_BY(device_);
  BlockRecords& block_records_ GPUMEMPROF_GUARDED_BY(device_);
  ShardPool& small_;
  ShardPool& large_;
  std::size_t& total_reserved_ GPUMEMPROF_GUARDED_BY(device_);
  const std::optional<std::size_t>& allowed_max_ GPUMEMPROF_GUARDED_BY(device_);
  MemoryStats& stats_ GPUMEMPROF_GUARDED_BY(stats_lock_);
  const EventDelivery& delivery_;
};

#undef GPUMEMPROF_EXECUTES

}  // namespace detail
GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/caching_allocator.cpp,
// through caching_allocator_bodies-inl.hpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/expandable_executor-inl.hpp"
#endif
