// Layer 2: a memory pool's id (PyTorch's MempoolId_t), its options and its stats -- the values
// that views, snapshots and the MemPool type share (private_pools.hpp holds the pools).
#pragma once

#include <atomic>
#include <cstdint>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// A memory pool's id, as PyTorch's MempoolId_t: (0, 0) is the default pool, (N, 0) a graph pool,
/// (0, N) a user pool (MemPool).
struct MempoolId {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
  [[nodiscard]] constexpr bool is_default() const noexcept { return first == 0 && second == 0; }
  friend constexpr bool operator==(MempoolId, MempoolId) noexcept = default;
};

/// A new graph pool id (N, 0), unique in the process (torch.cuda.graph_pool_handle()).
inline MempoolId graph_pool_handle() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return {next.fetch_add(1, std::memory_order_relaxed), 0};
}

/// A new user pool id (0, N), unique in the process (what torch.cuda.MemPool() takes).
inline MempoolId new_user_pool_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return {0, next.fetch_add(1, std::memory_order_relaxed)};
}

/// A private pool's options (torch.cuda.MemPool's arguments).
struct MemPoolOptions {
  /// When the default pool cannot get memory, an allocation may take a cached free block of this
  /// pool (last resort before OutOfMemoryError).
  bool use_on_oom = false;
  /// Blocks of this pool are never split: each allocation takes a whole free block or segment.
  bool no_split = false;
};

/// A private pool's memory now, recounted from its segments (bytes).
struct PoolStats {
  MempoolId id;
  int use_count = 0;                ///< users: MemPools, graphs (0: released, memory going back)
  std::int64_t segments = 0;        ///< segments of the pool
  std::int64_t reserved_bytes = 0;  ///< their bytes
  std::int64_t allocations = 0;     ///< live allocations
  std::int64_t allocated_bytes = 0;
  std::int64_t active_bytes = 0;  ///< allocated or waiting for other streams
  std::int64_t requested_bytes = 0;
};

GPUMEMPROF_NAMESPACE_END
