// Layer 2: private memory pools for users -- MemPool (torch.cuda.MemPool) and the scopes that
// route allocations to a pool (torch.cuda.use_mem_pool; the routing torch.cuda.graph sets up for
// its capture). docs/pools-and-graphs.md shows them at work.
#pragma once

#include <functional>
#include <thread>
#include <utility>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/mempool_id.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// A private pool of an allocator (by default: the default allocator of the current device),
/// kept alive by this object: allocations routed to it (UseMemPool, AllocateToPool) take its own
/// segments, which no other allocation uses. The destructor takes its user away; the pool's
/// memory goes back to the device once no user is left and each segment is free (at once for
/// free segments, later for those still holding blocks). Ids as PyTorch's: (0, N) unless given.
template <class Allocator = DeviceAllocator>
class BasicMemPool {
 public:
  explicit BasicMemPool(Allocator& allocator, MemPoolOptions options = {}, MempoolId id = new_user_pool_id())
      : allocator_(&allocator), id_(id), options_(options) {
    allocator.create_pool(id, options);
  }
  ~BasicMemPool() {
    try {
      allocator_->release_pool(id_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): only a device failure while freeing; the memory stays cached
    }
  }
  BasicMemPool(const BasicMemPool&) = delete;
  BasicMemPool& operator=(const BasicMemPool&) = delete;

  [[nodiscard]] MempoolId id() const noexcept { return id_; }
  [[nodiscard]] const MemPoolOptions& options() const noexcept { return options_; }
  [[nodiscard]] Allocator& allocator() const noexcept { return *allocator_; }
  /// Users of the pool: this object, active scopes, graphs sharing it.
  [[nodiscard]] int use_count() const { return stats().use_count; }
  /// The pool's memory now (bytes), recounted from its segments.
  [[nodiscard]] PoolStats stats() const { return *allocator_->pool_stats(id_); }

 private:
  Allocator* allocator_;
  MempoolId id_;
  MemPoolOptions options_;
};

/// A pool of a device's default allocator (`MemPool pool;` = the current device's).
class MemPool : public BasicMemPool<DeviceAllocator> {
 public:
  explicit MemPool(MemPoolOptions options = {}, const Device& device = Device())
      : BasicMemPool(default_allocator(device), options) {}
  using BasicMemPool::BasicMemPool;
};

/// While alive, the allocations of `allocator` for which `filter(stream)` holds go to pool `id`
/// (beginAllocateToPool .. endAllocateToPool); the scope is one of the pool's users. The filter
/// runs on the allocating thread; without one, every allocation goes to the pool.
template <class Allocator>
class AllocateToPool {
 public:
  AllocateToPool(Allocator& allocator, MempoolId id, std::function<bool(Stream)> filter)
      : allocator_(allocator), id_(id) {
    allocator.begin_allocate_to_pool(id, std::move(filter));
  }
  /// Allocations on `stream` (from any thread): a capture's (torch.cuda.graph routes them so).
  AllocateToPool(Allocator& allocator, MempoolId id, Stream stream)
      : AllocateToPool(allocator, id, [stream](Stream s) { return s == stream; }) {}
  ~AllocateToPool() {
    try {
      allocator_.end_allocate_to_pool(id_);
      allocator_.release_pool(id_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): only a device failure while freeing; the memory stays cached
    }
  }
  AllocateToPool(const AllocateToPool&) = delete;
  AllocateToPool& operator=(const AllocateToPool&) = delete;

 private:
  Allocator& allocator_;
  MempoolId id_;
};

/// While alive, this thread's allocations from the pool's allocator go to `pool`
/// (torch.cuda.use_mem_pool).
template <class Allocator>
class UseMemPool : public AllocateToPool<Allocator> {
 public:
  explicit UseMemPool(BasicMemPool<Allocator>& pool)
      : AllocateToPool<Allocator>(pool.allocator(), pool.id(), [tid = std::this_thread::get_id()](Stream) {
          return std::this_thread::get_id() == tid;
        }) {}
};
UseMemPool(MemPool&)->UseMemPool<DeviceAllocator>;

GPUMEMPROF_NAMESPACE_END
