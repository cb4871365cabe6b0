// Layer 2: the caching allocator's per-stream shards -- each stream's free trees and block records
// behind its own lock -- the registry that finds them, and the two pools' views over them.
//
// Invariants. A shard is created once per (stream, private pool) and lives as long as the
// registry, so a Shard& stays valid without a lock. The registry's list is in creation order and
// changes only under the owner's device mutex; its first kFastShards default-pool shards are also
// published lock-free in a hash table by stream (a slot's shard after its stream), so the hot
// path finds its shard without a lock, in a probe or two however many streams there are. A
// shard's trees, records and events are guarded by its own lock -- or by an exclusive section,
// which holds every shard: a set the analysis cannot name, so they carry no GUARDED_BY.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/event_buffer.hpp"
#include "gpumemprof/allocator/free_index.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/segment_chain.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/allocator/stats_ledger.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

using BlockTree = FreeIndex<Block>;
using BlockRecords = ObjectPool<Block>;

// One stream's free structures, behind its lock (the ledger's lane: the lane's lock also orders
// the stream's stat records). Its own cache lines: two streams never share one.
struct Shard : StatsLedger::Lane {
  // FreeIndex bins cover sizes up to these: small blocks never exceed their 2 MiB segment, and
  // larger free blocks are few (one tree holds them).
  static constexpr std::size_t kSmallExact = kSmallBuffer;
  static constexpr std::size_t kLargeExact = std::size_t{256} << 20;

  explicit Shard(Stream s, std::uint32_t p = 0)
      : stream(s), pool(p), trees{BlockTree(kLargeExact), BlockTree(kSmallExact)} {}
  Stream stream;
  std::uint32_t pool;    // private pool index (0: default); private pools' shards are used exclusively
  BlockTree trees[2];    // [0] large pool, [1] small pool
  BlockRecords records;  // block records split off and merged away
  EventLane events;      // this stream's events for the sinks (event_buffer.hpp)
};

class ShardRegistry {
 public:
  using List = std::vector<std::unique_ptr<Shard>>;
  /// Default-pool shards found without a lock: the first this many. A program that creates
  /// more streams than this over its life (benchmarks that make and destroy streams per run,
  /// say) finds the later ones under the owner's device mutex.
  static constexpr std::size_t kFastShards = 256;

  /// The default-pool shard of `s` among the published ones, without a lock; null otherwise.
  [[nodiscard]] Shard* find_fast(Stream s) const noexcept {
    // Open addressing, insert-only: a slot's shard is published (release) after its stream, so
    // a reader that sees the shard (acquire) sees its stream. An empty slot ends the probe.
    for (std::size_t i = home(s.id);; i = (i + 1) & (kSlots - 1)) {
      Shard* sh = fast_[i].shard.load(std::memory_order_acquire);
      if (sh == nullptr) return nullptr;
      if (fast_[i].stream.load(std::memory_order_relaxed) == s.id) return sh;
    }
  }
  /// The shard of (`s`, private pool `p`); null when none. The owner's device mutex held.
  [[nodiscard]] Shard* find(Stream s, std::uint32_t p = 0) const noexcept {
    for (const auto& sh : shards_) {
      if (sh->stream == s && sh->pool == p) return sh.get();
    }
    return nullptr;
  }
  /// Room for one more shard, so that add() cannot throw. May throw std::bad_alloc.
  void reserve_one() { shards_.reserve(shards_.size() + 1); }
  /// Appends `owned` (after reserve_one()) and publishes it when it is one of the first
  /// kFastShards of the default pool. The owner's device mutex held.
  Shard& add(std::unique_ptr<Shard> owned) noexcept {
    Shard* sh = shards_.emplace_back(std::move(owned)).get();
    if (sh->pool == 0 && fast_count_ < kFastShards) {
      std::size_t i = home(sh->stream.id);
      while (fast_[i].shard.load(std::memory_order_relaxed) != nullptr) i = (i + 1) & (kSlots - 1);
      fast_[i].stream.store(sh->stream.id, std::memory_order_relaxed);
      fast_[i].shard.store(sh, std::memory_order_release);
      ++fast_count_;
    }
    return *sh;
  }
  /// Every shard, in creation order. The owner's device mutex (or an exclusive section) held.
  [[nodiscard]] const List& all() const noexcept { return shards_; }

 private:
  // Twice the published shards at most: probes stay short, and one slot is always empty.
  static constexpr std::size_t kSlots = 2 * kFastShards;
  static std::size_t home(std::uintptr_t id) noexcept {  // Fibonacci hashing: handles are aligned pointers
    return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(kSlots)));
  }

  List shards_;
  // The published shards by stream: written once each, under the owner's device mutex; read by
  // every operation, so they share no line with what operations write. (Reading sh->stream
  // instead reads each probed shard's first line, which its owner writes on every operation --
  // its lock -- and cost 8 threads on their own streams ~0.9 us per pair on the H100 host.)
  struct Slot {
    std::atomic<Shard*> shard{nullptr};
    std::atomic<std::uintptr_t> stream{0};
  };
  std::array<Slot, kSlots> fast_{};
  std::size_t fast_count_ = 0;  // under the owner's device mutex
};

// One of the two pools (small, large): its statistics' pool, PyTorch's free-lookup count, and
// its trees in the shards of the registry.
struct ShardPool {
  bool small = false;
  StatPool stat_pool = StatPool::large_pool;
  std::atomic<std::uint64_t> free_lookups{0};  // PyTorch's get_free_blocks_call_count (GC ages)
  const ShardRegistry* shards = nullptr;

  // Slow paths only (device mutex held): the free tree of `s` in this pool (of private pool
  // `p`, when not 0).
  BlockTree* find(Stream s, std::uint32_t p = 0) const noexcept {
    Shard* sh = shards->find(s, p);
    return sh != nullptr ? &sh->trees[small] : nullptr;
  }
  // A block's (stream, private pool) always has a shard.
  BlockTree& at(Stream s, std::uint32_t p = 0) const noexcept { return *find(s, p); }
  // Files free block `b` in `tree` (its shard's tree in this pool), stamped with the count of
  // free-block lookups so far: its age for the garbage collector.
  void insert_free(BlockTree& tree, Block* b) const {
    b->gc_base = free_lookups.load(std::memory_order_relaxed);
    tree.insert(b);
  }
  void insert_free(Block* b) const { insert_free(at(b->stream, b->pool), b); }
  // Merges `src`, a neighbour of `dst`, into `dst` when it is free and mapped as `dst` is (taking
  // it out of `tree` and returning its record to `records`); the bytes merged, 0 when none.
  static std::size_t try_merge(Block* dst, Block* src, BlockTree& tree, BlockRecords& records) {
    if (src == nullptr || !src->is_free() || src->mapped != dst->mapped) return 0;
    if (src->mapped) tree.erase(src);  // unmapped holes are in no tree
    const std::size_t subsumed = SegmentChain::merge(dst, src);
    records.put(src);
    return subsumed;
  }
  template <class F>
  void for_each_tree(F&& f) const {  // the default pool's
    for (const auto& sh : shards->all()) {
      if (sh->pool == 0) f(sh->stream, sh->trees[small]);
    }
  }
  template <class F>
  void for_each_pool_tree(F&& f) const {  // every pool's: f(private pool index, stream, tree)
    for (const auto& sh : shards->all()) f(sh->pool, sh->stream, sh->trees[small]);
  }
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
